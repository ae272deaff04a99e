// Task generator tests: byte-identical output for the same arguments, split disjointness checked against
// the held-out rules restated here (not read from the generator), math answers recomputed by an
// independent expression evaluator, and the JSONL round trip.
#include "moxi/eval/task-generator.h"

#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/temp-dir.h"
#include "moxi/base/error.h"

namespace {

using namespace moxi::eval;

const domain kDomains[] = {domain::math, domain::terminal, domain::code};

TEST(TaskGenerator, SameArgumentsSameBytes) {
  for (auto d : kDomains) {
    for (auto s : {split::train, split::test}) {
      const auto a = to_jsonl(generate_tasks(d, s, 60, 42));
      EXPECT_EQ(a, to_jsonl(generate_tasks(d, s, 60, 42)));
      EXPECT_NE(a, to_jsonl(generate_tasks(d, s, 60, 43)));
      // Item i does not depend on n.
      const auto prefix = to_jsonl(generate_tasks(d, s, 20, 42));
      EXPECT_EQ(a.substr(0, prefix.size()), prefix);
    }
  }
}

TEST(TaskGenerator, AtomicWriteAndReadBack) {
  moxi::testing::temp_dir dir;
  const auto tasks = generate_tasks(domain::terminal, split::train, 25, 3);
  const std::string path = dir / "t.jsonl";
  write_file_atomic(path, to_jsonl(tasks));
  write_file_atomic(path, to_jsonl(tasks));  // replacing an existing file
  const auto back = read_jsonl(path);
  ASSERT_EQ(back.size(), tasks.size());
  EXPECT_EQ(to_jsonl(back), to_jsonl(tasks));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp-" + std::to_string(::getpid())));

  std::ofstream(dir / "bad.jsonl") << to_json(tasks[0]).dump() << "\n{\"id\": 1}\n";
  try {
    read_jsonl(dir / "bad.jsonl");
    FAIL() << "expected an error";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'id'"), std::string::npos) << e.what();
  }
  auto j = to_json(tasks[0]);
  j["check"]["files"][0]["path"] = "../escape.txt";
  EXPECT_THROW(task_from_json(j, "x"), moxi::error);
}

// The held-out rules of docs/tasks.md, restated: template -> (param, train range, test range).
struct rule {
  std::vector<std::string> keys;
  int64_t train_lo, train_hi, test_lo, test_hi;
};
const std::map<std::string, rule>& rules() {
  static const std::map<std::string, rule> r = {
      // math holds out operand combinations and phrasing families, not ranges: math-chat-test.cpp
      // terminal
      {"count_lines", {{"lines"}, 3, 40, 41, 99}},
      {"word_count", {{"lines"}, 3, 40, 41, 99}},
      {"head_n", {{"k"}, 1, 5, 6, 12}},
      {"grep_lines", {{"matches"}, 1, 3, 4, 6}},
      {"find_larger", {{"kb"}, 1, 2, 3, 4}},
      {"count_ext", {{"matches"}, 1, 3, 4, 6}},
      {"sort_lines", {{"lines"}, 3, 15, 16, 30}},
      {"mkdir_copy", {{"files"}, 1, 2, 3, 4}},
      {"rename", {{"stem_length"}, 3, 6, 7, 12}},
      {"append", {{"words"}, 1, 3, 4, 6}},
      // code
      {"sum_to", {{"n"}, 2, 30, 31, 200}},
      {"count_above", {{"t"}, 2, 50, 51, 500}},
      {"max_of", {{"k"}, 2, 50, 51, 500}},
      {"factorial", {{"n"}, 2, 8, 9, 15}},
      {"average", {{"k"}, 2, 50, 51, 500}},
      {"clamp", {{"lo"}, 2, 50, 51, 500}},
  };
  return r;
}
const std::set<std::string> kTestOnly = {"div",           "ages",          "tail_n",       "unique_count",
                                         "delete_ext",    "replace_word",  "largest_file", "count_vowels",
                                         "to_fahrenheit", "second_largest"};

std::vector<int64_t> values(const nlohmann::json& v) {
  if (v.is_array()) {
    std::vector<int64_t> out;
    for (const auto& x : v) out.push_back(x.get<int64_t>());
    return out;
  }
  return {v.get<int64_t>()};
}

std::string base_name(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

TEST(TaskGenerator, TestSplitHoldsOutTemplatesAndRanges) {
  for (auto d : kDomains) {
    SCOPED_TRACE(to_string(d));
    // Different seeds too: disjointness must not rely on sharing a seed.
    const auto train = generate_tasks(d, split::train, 600, 1);
    const auto test = generate_tasks(d, split::test, 600, 2);
    std::set<std::string> train_templates, test_templates, train_prompts, train_names, train_dirs;
    for (const auto& t : train) {
      train_templates.insert(t.template_name);
      train_prompts.insert(t.prompt);
      for (const auto& f : t.files) {
        train_names.insert(base_name(f.path));
        if (f.path.find('/') != std::string::npos) train_dirs.insert(f.path.substr(0, f.path.find('/')));
      }
      EXPECT_EQ(t.split, split::train);
      EXPECT_FALSE(kTestOnly.count(t.template_name)) << t.id << " uses held-out template " << t.template_name;
    }
    for (const auto& t : test) {
      test_templates.insert(t.template_name);
      EXPECT_EQ(t.split, split::test);
      EXPECT_FALSE(train_prompts.count(t.prompt)) << t.id << " repeats a train prompt";
      for (const auto& f : t.files) {
        EXPECT_FALSE(train_names.count(base_name(f.path)))
            << t.id << ": " << f.path << " is a train file name";
        if (f.path.find('/') != std::string::npos) {
          EXPECT_FALSE(train_dirs.count(f.path.substr(0, f.path.find('/')))) << t.id << ": " << f.path;
        }
      }
    }
    // Every template is exercised; the test split has held-out templates and the shared ones.
    for (const auto& info : templates(d)) {
      EXPECT_TRUE(test_templates.count(info.name)) << info.name;
      EXPECT_EQ(train_templates.count(info.name), info.test_only ? 0u : 1u) << info.name;
      EXPECT_EQ(kTestOnly.count(info.name) == 1, info.test_only) << info.name;
      if (!info.test_only && d != domain::math) {
        EXPECT_TRUE(rules().count(info.name)) << "no restated rule for " << info.name;
      }
    }
    // Shared templates: parameters inside their split's documented range.
    for (const auto* set : {&train, &test}) {
      for (const auto& t : *set) {
        auto it = rules().find(t.template_name);
        if (it == rules().end()) continue;
        const rule& r = it->second;
        const bool is_test = t.split == split::test;
        for (const auto& key : r.keys) {
          ASSERT_TRUE(t.params.contains(key)) << t.id << " lacks param " << key;
          for (int64_t v : values(t.params[key])) {
            EXPECT_GE(v, is_test ? r.test_lo : r.train_lo) << t.id << " " << key;
            EXPECT_LE(v, is_test ? r.test_hi : r.train_hi) << t.id << " " << key;
          }
        }
      }
    }
  }
}

// An evaluator for + - * / and parentheses over integers, written for this test only.
struct expr_parser {
  const std::string& s;
  size_t i = 0;
  void ws() {
    while (i < s.size() && s[i] == ' ') ++i;
  }
  int64_t atom() {
    ws();
    if (s[i] == '(') {
      ++i;
      const int64_t v = sum();
      ws();
      EXPECT_EQ(s[i], ')');
      ++i;
      return v;
    }
    int64_t v = 0;
    EXPECT_TRUE(std::isdigit(static_cast<unsigned char>(s[i]))) << s;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) v = v * 10 + (s[i++] - '0');
    return v;
  }
  int64_t product() {
    int64_t v = atom();
    for (ws(); i < s.size() && (s[i] == '*' || s[i] == '/'); ws()) {
      const char op = s[i++];
      const int64_t r = atom();
      if (op == '*') {
        v *= r;
      } else {
        EXPECT_EQ(v % r, 0) << s << ": inexact division";
        v /= r;
      }
    }
    return v;
  }
  int64_t sum() {
    int64_t v = product();
    for (ws(); i < s.size() && (s[i] == '+' || s[i] == '-'); ws()) {
      const char op = s[i++];
      const int64_t r = product();
      v = op == '+' ? v + r : v - r;
    }
    return v;
  }
};

TEST(TaskGenerator, MathAnswersAreTheValueOfTheirExpressionAndPrompt) {
  for (auto s : {split::train, split::test}) {
    for (const auto& t : generate_tasks(domain::math, s, 500, 9)) {
      expr_parser p{t.expression};
      const int64_t v = p.sum();
      EXPECT_EQ(p.i, t.expression.size()) << t.expression;
      EXPECT_EQ(std::to_string(v), t.answer) << t.id << ": " << t.expression;
      // The worked reference ends with the answer (its lines: math-chat-test.cpp).
      EXPECT_EQ(t.reference.substr(t.reference.rfind('\n') + 1), "Answer: " + t.answer);
      // Every number of the expression is stated in the prompt, so the prompt determines the answer.
      std::istringstream in(t.expression);
      for (std::string tok; in >> tok;) {
        std::string digits;
        for (char c : tok) {
          if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
        }
        if (!digits.empty()) {
          EXPECT_NE(t.prompt.find(digits), std::string::npos)
              << t.id << ": " << digits << " not in " << t.prompt;
        }
      }
    }
  }
}

TEST(TaskGenerator, ItemsCarryWhatTheirCheckerNeeds) {
  for (auto d : kDomains) {
    for (const auto& t : generate_tasks(d, split::test, 100, 5)) {
      EXPECT_FALSE(t.id.empty());
      EXPECT_FALSE(t.prompt.empty());
      EXPECT_FALSE(t.reference.empty());
      const auto j = to_json(t);
      EXPECT_EQ(to_json(task_from_json(j, "x")), j);
      if (d == domain::terminal) {
        EXPECT_FALSE(t.files.empty()) << t.id;
        std::set<std::string> paths;
        for (const auto& f : t.files)
          EXPECT_TRUE(paths.insert(f.path).second) << t.id << " repeats " << f.path;
      }
      if (d == domain::code) {
        EXPECT_NE(t.program, t.reference) << t.id;
        EXPECT_NE(t.prompt.find(t.program), std::string::npos) << t.id;
        EXPECT_NE(t.test.find("from solution import"), std::string::npos);
      }
    }
  }
}

}  // namespace
