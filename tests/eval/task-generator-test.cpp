// Task generator tests: byte-identical output for the same arguments, split disjointness checked against
// the held-out rules restated here (not read from the generator), math answers recomputed by an
// independent expression evaluator, and the JSONL round trip.
#include "moxi/eval/task-generator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "common/int-expression.h"
#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/eval/task-generator-detail.h"
#include "moxi/formats/bpe-trainer.h"
#include "moxi/formats/tokenizer.h"

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

// The held-out rules of docs/tasks.md, restated: template -> (params, train ranges, test ranges). Terminal
// and code ranges interleave (the test range lies between train's), so no number length is test-only.
using span = std::pair<int64_t, int64_t>;
struct rule {
  std::vector<std::string> keys;
  std::vector<span> train, test;
};
const std::map<std::string, rule>& rules() {
  static const std::map<std::string, rule> r = {
      // math holds out operand combinations and phrasing families, not ranges: math-chat-test.cpp
      // terminal
      {"count_lines", {{"lines"}, {{3, 40}, {71, 99}}, {{41, 70}}}},
      {"word_count", {{"lines"}, {{3, 40}, {71, 99}}, {{41, 70}}}},
      {"head_n", {{"k"}, {{1, 5}, {11, 20}}, {{6, 10}}}},
      {"tail_n", {{"k"}, {{1, 5}, {11, 20}}, {{6, 10}}}},
      {"grep_lines", {{"matches"}, {{1, 2}, {5, 6}}, {{3, 4}}}},
      {"find_larger", {{"kb"}, {{1, 2}, {5, 5}}, {{3, 4}}}},
      {"count_ext", {{"matches"}, {{1, 2}, {5, 6}}, {{3, 4}}}},
      {"sort_lines", {{"lines"}, {{3, 10}, {21, 30}}, {{11, 20}}}},
      {"mkdir_copy", {{"files"}, {{1, 2}, {5, 5}}, {{3, 4}}}},
      {"rename", {{"stem_length"}, {{3, 6}, {10, 12}}, {{7, 9}}}},
      {"append", {{"words"}, {{1, 2}, {5, 6}}, {{3, 4}}}},
      {"unique_count", {{"distinct"}, {{2, 3}, {7, 8}}, {{4, 6}}}},
      {"delete_ext", {{"files"}, {{1, 2}, {5, 6}}, {{3, 4}}}},
      {"replace_word", {{"matches"}, {{1, 2}, {5, 6}}, {{3, 4}}}},
      {"show_file", {{"lines"}, {{3, 10}, {21, 30}}, {{11, 20}}}},
      {"list_by_size", {{"files"}, {{2, 3}, {6, 7}}, {{4, 5}}}},
      {"followup", {{}, {}, {}}},  // held out by phrasing family and file names only
      // code
      {"sum_to", {{"n"}, {{2, 30}, {101, 200}}, {{31, 100}}}},
      {"count_above", {{"t"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"max_of", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"factorial", {{"n"}, {{2, 8}, {13, 15}}, {{9, 12}}}},
      {"average", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"clamp", {{"lo"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"to_celsius", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"rect_area", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"perimeter", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"abs_diff", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"sum_squares", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"count_below", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"is_even", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"min_of", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"product", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"last_item", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"smallest", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"count_digits", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"half", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
      {"countdown", {{"k"}, {{2, 50}, {201, 500}}, {{51, 200}}}},
  };
  return r;
}
const std::set<std::string> kTestOnly = {"div",          "ages",          "largest_file",  "total_lines",
                                         "count_vowels", "to_fahrenheit", "second_largest"};
// Templates the test split never draws (docs/tasks.md): terminal's train-only ones (the user prompt set
// measures them), code's composed functions and the math stories.
const std::set<std::string> kTrainOnly = {"line_n",      "skip_header",   "count_matching", "touch_file",
                                          "copy_file",   "reverse_lines", "char_count",     "delete_file",
                                          "sort_unique", "uppercase",     "mkdir_nested",   "move_into",
                                          "composed",    "story",         "story_share"};

// The phrasing families of docs/tasks.md, restated: domain -> (train families, test-only families).
const std::map<domain, std::pair<std::set<std::string>, std::set<std::string>>>& family_rules() {
  static const std::map<domain, std::pair<std::set<std::string>, std::set<std::string>>> f = {
      {domain::terminal, {{"imperative", "question", "terse", "polite", "context"}, {"indirect", "casual"}}},
      {domain::code, {{"formal", "imperative", "terse", "question"}, {"story", "casual"}}},
  };
  return f;
}

bool in_spans(int64_t v, const std::vector<span>& spans) {
  return std::any_of(spans.begin(), spans.end(),
                     [&](const span& s) { return v >= s.first && v <= s.second; });
}

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

// Every directory component of a relative path ("a/b/c.txt" -> a, b).
std::vector<std::string> dir_parts(const std::string& path) {
  std::vector<std::string> v;
  for (size_t at = 0, slash; (slash = path.find('/', at)) != std::string::npos; at = slash + 1)
    v.push_back(path.substr(at, slash - at));
  return v;
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
        for (const auto& part : dir_parts(f.path)) train_dirs.insert(part);
      }
      if (t.params.contains("dir")) train_dirs.insert(t.params["dir"].get<std::string>());
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
        for (const auto& part : dir_parts(f.path)) {
          EXPECT_FALSE(train_dirs.count(part)) << t.id << ": " << f.path;
        }
      }
      if (t.params.contains("dir")) {
        EXPECT_FALSE(train_dirs.count(t.params["dir"].get<std::string>())) << t.id;
      }
    }
    // Every template is exercised; the test split has held-out templates and the shared ones.
    for (const auto& info : templates(d)) {
      EXPECT_EQ(test_templates.count(info.name), info.train_only ? 0u : 1u) << info.name;
      EXPECT_EQ(train_templates.count(info.name), info.test_only ? 0u : 1u) << info.name;
      EXPECT_EQ(kTestOnly.count(info.name) == 1, info.test_only) << info.name;
      EXPECT_EQ(kTrainOnly.count(info.name) == 1, info.train_only) << info.name;
      if (!info.test_only && !info.train_only && d != domain::math) {
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
            EXPECT_TRUE(in_spans(v, is_test ? r.test : r.train)) << t.id << " " << key << " = " << v;
            EXPECT_FALSE(in_spans(v, is_test ? r.train : r.test)) << t.id << " " << key << " = " << v;
          }
        }
      }
    }
  }
}

// Names come from a broad pool in train, so copying the given name is the only way to get it right: the
// files of 600 train items use hundreds of distinct words (a short list would give a few dozen).
TEST(TaskGenerator, TrainNamesComeFromABroadPool) {
  std::set<std::string> words;
  size_t parts = 0;
  for (const auto& t : generate_tasks(domain::terminal, split::train, 600, 3)) {
    for (const auto& f : t.files) {
      std::string w;
      for (char c : f.path + "/") {
        if (c >= 'a' && c <= 'z') {
          w += c;
          continue;
        }
        if (w.size() >= 4) words.insert(w), ++parts;  // extensions are 2-4 letters after a dot
        w.clear();
      }
    }
  }
  EXPECT_GT(parts, 2000u);
  EXPECT_GT(words.size(), 500u) << "distinct name words in " << parts << " name parts";
}

// Adjacent lowercase letter pairs in the file paths of n generated terminal items.
std::set<std::string> path_letter_pairs(split s, size_t n) {
  std::set<std::string> out;
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  for (const auto& t : generate_tasks(domain::terminal, s, n, 5)) {
    for (const auto& f : t.files) {
      for (size_t i = 0; i + 1 < f.path.size(); ++i) {
        if (lower(f.path[i]) && lower(f.path[i + 1])) out.insert(f.path.substr(i, 2));
      }
    }
  }
  return out;
}

// The letter pairs of test names (real words: `metrics`, `agenda`) all occur in train names: no test name
// needs a letter sequence training never wrote (the made-up words use all letters).
TEST(TaskGenerator, TrainNamesCoverTheLetterPairsOfTestNames) {
  const auto train = path_letter_pairs(split::train, 3000), test = path_letter_pairs(split::test, 500);
  ASSERT_GT(test.size(), 100u);
  std::string missing;
  for (const auto& p : test) {
    if (!train.count(p)) missing += " " + p;
  }
  EXPECT_EQ(missing, "") << "test letter pairs no train name has";
}

// Letter pairs are not enough: a BPE tokenizer trained on the conversations learns pieces from their English
// (`ord`, `cont`, `gest`, `ers`), test names are real words that split into such pieces, and a model learns
// to write a piece only by writing it in training. So almost every test reference must be made of pieces
// that some train reply writes. The reference is moxi's BPE trainer, run on the train conversations as a
// recipe trains its tokenizer (docs/train.md). With made-up words of onset-vowel-coda syllables only, 41 of
// 300 test references had a piece no train reply writes; with two thirds of them joined from English word
// pieces, 19.
TEST(TaskGenerator, TestReferencesArePiecesTrainRepliesWrite) {
  moxi::formats::bpe_train_options options;
  options.vocab_size = 1024;
  options.split = moxi::formats::bpe_split::llama3_digits;
  moxi::formats::bpe_trainer trainer(options);
  const auto train = generate_tasks(domain::terminal, split::train, 4000, 5);
  for (const auto& t : train) {
    for (const auto& m : t.history) trainer.add_text(m.content);
    trainer.add_text(t.prompt);
    trainer.add_text(t.reference);
  }
  const auto tok =
      moxi::formats::tokenizer::from_hf_json(moxi::formats::bpe_to_hf_json(trainer.train()), "trained");
  std::set<moxi::token_id> written;
  for (const auto& t : train) {
    for (const auto& m : t.history) {
      if (m.role == "assistant") {
        for (auto id : tok.encode(m.content)) written.insert(id);
      }
    }
    for (auto id : tok.encode(t.reference)) written.insert(id);
  }
  const auto test = generate_tasks(domain::terminal, split::test, 300, 5);
  size_t unwritten = 0;
  std::string examples;
  for (const auto& t : test) {
    for (auto id : tok.encode(t.reference)) {
      if (written.count(id)) continue;
      ++unwritten;
      if (unwritten <= 10)
        examples += " [" + t.reference + ": " + tok.decode(std::vector<moxi::token_id>{id}) + "]";
      break;
    }
  }
  EXPECT_LE(unwritten, test.size() / 10) << "test references with a piece no train reply writes:" << examples;
}

TEST(TaskGenerator, TemplatesCanBeChosen) {
  for (const auto& t : generate_tasks(domain::terminal, split::train, 100, 2, {"rename", "head_n"}))
    EXPECT_TRUE(t.template_name == "rename" || t.template_name == "head_n") << t.id;
  for (const auto& t : generate_tasks(domain::terminal, split::train, 30, 2, {"followup"}))
    EXPECT_EQ(t.template_name, "followup") << t.id;
  // A test-only template exists in the test split only.
  for (const auto& t : generate_tasks(domain::terminal, split::test, 30, 2, {"largest_file"}))
    EXPECT_EQ(t.template_name, "largest_file") << t.id;
  EXPECT_THROW(generate_tasks(domain::terminal, split::train, 5, 2, {"largest_file"}), moxi::error);
  EXPECT_THROW(generate_tasks(domain::chat, split::train, 5, 2, {"nope"}), moxi::error);
}

// "shared" names the templates both splits draw: for code train, the twenty fixed templates (listed here as
// recipes listed them before the group existed), so it draws those exact items and no composed one.
TEST(TaskGenerator, SharedGroupIsTheTemplatesBothSplitsDraw) {
  const std::vector<std::string> fixed = {
      "sum_to",      "count_above", "max_of",  "factorial", "average",   "clamp",        "to_celsius",
      "rect_area",   "perimeter",   "abs_diff", "sum_squares", "count_below", "is_even", "min_of",
      "product",     "last_item",   "smallest", "count_digits", "half",    "countdown"};
  const auto a = generate_tasks(domain::code, split::train, 200, 5, {"shared"});
  const auto b = generate_tasks(domain::code, split::train, 200, 5, fixed);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].template_name, b[i].template_name) << i;
    EXPECT_EQ(a[i].prompt, b[i].prompt) << i;
    EXPECT_EQ(a[i].reference, b[i].reference) << i;
    EXPECT_NE(a[i].template_name, "composed") << i;
  }
  // In the test split it leaves out the test-only templates; with a name beside it, that one is added.
  for (const auto& t : generate_tasks(domain::math, split::test, 100, 5, {"shared"}))
    EXPECT_TRUE(t.template_name != "div" && t.template_name != "ages") << t.id;
  bool div = false;
  for (const auto& t : generate_tasks(domain::math, split::test, 100, 5, {"shared", "div"}))
    div = div || t.template_name == "div";
  EXPECT_TRUE(div);
}

TEST(TaskGenerator, MathAnswersAreTheValueOfTheirExpressionAndPrompt) {
  for (auto s : {split::train, split::test}) {
    for (const auto& t : generate_tasks(domain::math, s, 500, 9)) {
      const auto v = moxi::testing::eval_int_expression(t.expression);
      ASSERT_TRUE(v) << t.id << ": " << t.expression;
      EXPECT_EQ(std::to_string(*v), t.answer) << t.id << ": " << t.expression;
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

TEST(TaskGenerator, PhrasingFamiliesAreHeldOutLikeTemplates) {
  for (const auto& [d, rule] : family_rules()) {
    SCOPED_TRACE(to_string(d));
    const auto& [train_families, test_families] = rule;
    for (const auto& f : families(d)) {
      EXPECT_EQ(f.test_only ? test_families.count(f.name) : train_families.count(f.name), 1u) << f.name;
    }
    EXPECT_EQ(families(d).size(), train_families.size() + test_families.size());
    std::map<std::string, std::set<std::string>> seen;  // split -> families
    std::set<std::string> train_requests;
    for (auto s : {split::train, split::test}) {
      for (const auto& t : generate_tasks(d, s, 600, s == split::train ? 3 : 4)) {
        ASSERT_TRUE(t.params.contains("family")) << t.id;
        const std::string f = t.params["family"].get<std::string>();
        seen[to_string(s)].insert(f);
        EXPECT_EQ((s == split::train ? train_families : test_families).count(f), 1u) << t.id << ": " << f;
        // The request (the prompt without a code task's program) is never one train asked.
        const std::string request = t.prompt.substr(0, t.prompt.find("\n\n"));
        if (s == split::train) train_requests.insert(request);
        if (s == split::test) {
          EXPECT_FALSE(train_requests.count(request)) << t.id << ": " << request;
        }
      }
    }
    EXPECT_EQ(seen["train"], train_families);
    EXPECT_EQ(seen["test"], test_families);
  }
  EXPECT_TRUE(families(domain::math).empty());
}

// The shell word for a path, restated: single quotes around anything beyond [A-Za-z0-9._/-].
std::string quoted(const std::string& path) {
  for (char c : path) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '/' && c != '-')
      return "'" + path + "'";
  }
  return path;
}

TEST(TaskGenerator, FileNamesAreVariedQuotedAndNamedInTheRequest) {
  for (auto s : {split::train, split::test}) {
    std::set<std::string> exts;
    int spaced = 0, nested = 0, digits = 0, dashed = 0, dotted = 0, about_a_file = 0;
    for (const auto& t : generate_tasks(domain::terminal, s, 1000, 6)) {
      for (const auto& f : t.files) {
        const std::string name = base_name(f.path);
        exts.insert(name.substr(name.rfind('.') + 1));
        const std::string stem = name.substr(0, name.rfind('.'));
        spaced += name.find(' ') != std::string::npos;
        nested += dir_parts(f.path).size() >= 2;
        digits += std::any_of(stem.begin(), stem.end(), [](char c) { return std::isdigit(c); });
        dashed += stem.find_first_of("-_") != std::string::npos;
        dotted += stem.find('.') != std::string::npos;
      }
      if (!t.params.contains("file")) continue;
      ++about_a_file;
      const std::string file = t.params["file"].get<std::string>();
      EXPECT_TRUE(
          std::any_of(t.files.begin(), t.files.end(), [&](const file_entry& f) { return f.path == file; }))
          << t.id << ": " << file;
      // The command names the file as one shell word, and the conversation names it for the model to copy.
      EXPECT_NE(t.reference.find(" " + quoted(file)), std::string::npos) << t.id << ": " << t.reference;
      std::string said = t.prompt;
      for (const auto& m : t.history) said += "\n" + m.content;
      EXPECT_NE(said.find(file), std::string::npos) << t.id << ": " << file << " not in " << said;
    }
    EXPECT_GE(exts.size(), 12u);
    EXPECT_GT(spaced, 0);
    EXPECT_GT(nested, 0);
    EXPECT_GT(digits, 0);
    EXPECT_GT(dashed, 0);
    EXPECT_GT(dotted, 0);
    EXPECT_GT(about_a_file, 300);
  }
}

// generate_options::capitals: the test split is the same, train names without it have no capital letter,
// and with it about a fifth of the made-up words are in capitals or capitalized, named in the conversation
// as the command writes them.
TEST(TaskGenerator, CapitalsPutSomeTrainNamesInCapitalsOnly) {
  EXPECT_EQ(to_jsonl(generate_tasks(domain::terminal, split::test, 300, 4)),
            to_jsonl(generate_tasks(domain::terminal, split::test, 300, 4, {}, {.capitals = true})));
  auto words_of = [](const std::string& text) {  // maximal runs of letters
    std::vector<std::string> out;
    std::string w;
    for (char c : text + " ") {
      if (std::isalpha(static_cast<unsigned char>(c))) {
        w += c;
      } else if (!w.empty()) {
        out.push_back(w);
        w.clear();
      }
    }
    return out;
  };
  auto has_upper = [](const std::string& w) {
    return std::any_of(w.begin(), w.end(),
                       [](char c) { return std::isupper(static_cast<unsigned char>(c)); });
  };
  for (const auto& t : generate_tasks(domain::terminal, split::train, 1000, 8)) {
    for (const auto& f : t.files) EXPECT_FALSE(has_upper(f.path)) << t.id << ": " << f.path;
  }
  size_t items = 0, with_capitals = 0, all_caps = 0, capitalized = 0;
  for (const auto& t : generate_tasks(domain::terminal, split::train, 1000, 8, {}, {.capitals = true})) {
    ++items;
    std::string said = t.prompt;
    for (const auto& m : t.history) said += "\n" + m.content;
    bool any = false;
    for (const auto& f : t.files) {
      for (const auto& w : words_of(f.path)) {
        if (!has_upper(w)) continue;
        any = true;
        const bool upper = std::all_of(w.begin(), w.end(), [](char c) { return std::isupper(c); });
        const bool first = std::all_of(w.begin() + 1, w.end(), [](char c) { return std::islower(c); });
        EXPECT_TRUE(upper || first) << t.id << ": " << f.path;
        all_caps += upper && w.size() > 1;
        capitalized += first && !upper;
      }
    }
    for (const auto& w : words_of(t.reference)) {
      if (!has_upper(w) || w == "S" || w == "A" || w == "Z") continue;  // ls -S, tr a-z A-Z
      any = true;
      EXPECT_NE(said.find(w), std::string::npos) << t.id << ": the command's " << w << " is not in " << said;
    }
    with_capitals += any;
  }
  EXPECT_GT(with_capitals, items / 5);
  EXPECT_LT(with_capitals, items * 4 / 5);
  EXPECT_GT(all_caps, 100u);
  EXPECT_GT(capitalized, 100u);
}

// generate_options::bare_requests: the test split is the same; with it about a quarter of train's code
// requests name the function and nothing else (no example call, no description), and every item keeps the
// program, fix and tests it has without the option.
TEST(TaskGenerator, BareRequestsNameOnlyTheFunction) {
  EXPECT_EQ(to_jsonl(generate_tasks(domain::code, split::test, 300, 4)),
            to_jsonl(generate_tasks(domain::code, split::test, 300, 4, {}, {.bare_requests = true})));
  const auto plain = generate_tasks(domain::code, split::train, 800, 5);
  const auto bare = generate_tasks(domain::code, split::train, 800, 5, {}, {.bare_requests = true});
  ASSERT_EQ(plain.size(), bare.size());
  size_t n_bare = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    const task &p = plain[i], &b = bare[i];
    EXPECT_FALSE(p.params.contains("bare")) << p.id;
    EXPECT_EQ(p.reference, b.reference) << b.id;
    EXPECT_EQ(p.program, b.program) << b.id;
    EXPECT_EQ(p.test, b.test) << b.id;
    const std::string program_part = b.prompt.substr(b.prompt.find("\n\n"));
    EXPECT_EQ(p.prompt.substr(p.prompt.find("\n\n")), program_part) << b.id;
    if (!b.params.contains("bare")) {
      EXPECT_EQ(p.prompt, b.prompt) << b.id;
      continue;
    }
    ++n_bare;
    // The request names the function the program defines, and shows neither a call nor its value.
    const std::string request = b.prompt.substr(0, b.prompt.find("\n\n"));
    const size_t def = b.program.find("def ") + 4;
    const std::string fn = b.program.substr(def, b.program.find('(', def) - def);
    EXPECT_NE(request.find(fn), std::string::npos) << b.id << ": " << request;
    EXPECT_EQ(request.find('('), std::string::npos) << b.id << ": " << request;
    std::string rest = request;
    rest.erase(rest.find(fn), fn.size());
    EXPECT_EQ(rest.find_first_of("0123456789"), std::string::npos) << b.id << ": " << request;
  }
  EXPECT_GT(n_bare, plain.size() / 6);
  EXPECT_LT(n_bare, plain.size() / 3);
}

TEST(TaskGenerator, FollowUpsContinueAConversationOnTheSameTree) {
  for (auto s : {split::train, split::test}) {
    const auto tasks = generate_tasks(domain::terminal, s, 1000, 8);
    int followups = 0;
    std::set<std::string> kinds;
    for (const auto& t : tasks) {
      if (t.template_name != "followup") {
        EXPECT_TRUE(t.history.empty()) << t.id;
        continue;
      }
      ++followups;
      kinds.insert(t.params["followup"].get<std::string>());
      ASSERT_EQ(t.history.size(), 2u) << t.id;
      EXPECT_EQ(t.history[0].role, "user");
      EXPECT_EQ(t.history[1].role, "assistant");
      // The first request was about a file of this tree, and its answer names that file.
      bool names_a_file = false;
      for (const auto& f : t.files)
        names_a_file |= t.history[1].content.find(quoted(f.path)) != std::string::npos;
      EXPECT_TRUE(names_a_file) << t.id << ": " << t.history[1].content;
      EXPECT_NE(t.history[1].content, "") << t.id;
      const auto j = to_json(t);
      EXPECT_EQ(to_json(task_from_json(j, "x")), j);
    }
    // About 15 % (1000 draws: well inside 8..25 %).
    EXPECT_GE(followups, 80);
    EXPECT_LE(followups, 250);
    EXPECT_EQ(kinds, (std::set<std::string>{"other_file", "other_count", "part_of_it"}));
  }
}

TEST(TaskGenerator, HistoryRoundTripsAndBadHistoryIsRejected) {
  task t = generate_tasks(domain::terminal, split::train, 1, 1)[0];
  t.history = {{"user", "count lines in a.txt"}, {"assistant", "wc -l a.txt"}};
  moxi::testing::temp_dir dir;
  const std::string path = dir / "h.jsonl";
  write_file_atomic(path, to_jsonl({t}));
  const auto back = read_jsonl(path);
  ASSERT_EQ(back.size(), 1u);
  ASSERT_EQ(back[0].history.size(), 2u);
  EXPECT_EQ(back[0].history[1].content, "wc -l a.txt");
  EXPECT_EQ(to_jsonl(back), to_jsonl({t}));
  // The key is written only when there is history.
  task single = t;
  single.history.clear();
  EXPECT_EQ(to_jsonl({single}).find("\"history\""), std::string::npos);
  EXPECT_LT(to_jsonl({t}).find("\"history\""), to_jsonl({t}).find("\"prompt\""));

  using nlohmann::json;
  const json user = {{"role", "user"}, {"content", "u"}},
             assistant = {{"role", "assistant"}, {"content", "a"}};
  const std::vector<std::pair<json, std::string>> bad = {
      {json::object(), "not an array"},
      {json::array({user}), "must end with an assistant turn"},
      {json::array({assistant, user}), "history[0].role"},
      {json::array({user, user}), "history[1].role"},
      {json::array({user, {{"role", "system"}, {"content", "s"}}}), "'system'"},
      {json::array({user, {{"role", "assistant"}}}), "history[1]: field 'content'"},
      {json::array({user, 7}), "history[1] is not an object"},
  };
  for (const auto& [h, want] : bad) {
    auto j = to_json(t);
    j["history"] = h;
    try {
      task_from_json(j, "f.jsonl:3");
      ADD_FAILURE() << "accepted history " << h.dump();
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find("f.jsonl:3: history"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// The hand-written prompt set: large enough, well formed, and worded unlike anything the generator makes
// (its references are run through their checkers in check-test.cpp).
// Casual rewrites and docstring-free programs are train only, leave the test split as it is, and keep what
// the reply copies: the file names (FileNamesAreVariedQuotedAndNamedInTheRequest), the operands
// (MathAnswersAreTheValueOfTheirExpressionAndPrompt) and the program (checked here).
TEST(TaskGenerator, CasualRewritesAreTrainOnly) {
  for (auto d : kDomains) {
    SCOPED_TRACE(to_string(d));
    int rewritten = 0, casual = 0, no_doc = 0;
    const int n = 1500;
    for (const auto& t : generate_tasks(d, split::train, n, 12)) {
      rewritten += t.params.value("rewritten", false);
      casual += t.params.value("casual", false);
      if (t.params.value("docstring", true)) continue;
      ++no_doc;
      EXPECT_EQ(t.program.find("\"\"\""), std::string::npos) << t.id;
      EXPECT_EQ(t.reference.find("\"\"\""), std::string::npos) << t.id;
      EXPECT_NE(t.program, t.reference) << t.id;
      EXPECT_NE(t.prompt.find("\n\n" + t.program), std::string::npos) << t.id;
      // The program and its fix differ in one place, as with the docstring.
      size_t a = 0;
      while (a < t.program.size() && t.program[a] == t.reference[a]) ++a;
      EXPECT_GT(a, t.program.find('\n')) << t.id << ": the def line changed";
    }
    // A third rewritten (the stream decides: 1/3 within a few standard deviations), a fifth of the
    // math phrasings casual (every train math template has casual phrasings), a third of the programs without
    // a docstring.
    EXPECT_NEAR(rewritten, n / 3, 80);
    EXPECT_NEAR(casual, d == domain::math ? n / 5 : 0, 60);
    EXPECT_NEAR(no_doc, d == domain::code ? n / 3 : 0, 80);
    for (auto s : {split::test, split::length}) {
      if (s == split::length && d != domain::math) continue;
      for (const auto& t : generate_tasks(d, s, 500, 12)) {
        EXPECT_FALSE(t.params.contains("rewritten") || t.params.contains("casual") ||
                     t.params.contains("docstring"))
            << t.id;
      }
    }
  }
}

// Words of a phrasing: lowercase letter runs.
std::set<std::string> words_of(const std::string& text) {
  std::set<std::string> w;
  std::string cur;
  for (char c : text + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      cur += char(std::tolower(static_cast<unsigned char>(c)));
    } else if (!cur.empty()) {
      w.insert(cur);
      cur.clear();
    }
  }
  return w;
}

// The casual markers and the casual math phrasings use no word that only a held-out family uses, so a
// held-out family stays a way of asking that train never shows (families restated in family_rules and
// below).
TEST(TaskGenerator, CasualWordsAreNoHeldOutFamilysOwn) {
  namespace dt = moxi::eval::detail;
  std::set<std::string> train_words, test_words;
  auto add = [](std::set<std::string>& to, const std::string& text) {
    for (const auto& w : words_of(text)) to.insert(w);
  };
  const auto& terminal_rule = family_rules().at(domain::terminal);
  for (const auto* table : {&dt::terminal_phrasings(), &dt::followup_phrasings()}) {
    for (const auto& [tmpl, fams] : *table) {
      for (const auto& [fam, phrasings] : fams) {
        for (const auto& p : phrasings) add(terminal_rule.second.count(fam) ? test_words : train_words, p);
      }
    }
  }
  const auto& code_rule = family_rules().at(domain::code);
  for (const auto& [fam, phrasings] : dt::code_phrasings()) {
    for (const auto& p : phrasings) add(code_rule.second.count(fam) ? test_words : train_words, p);
  }
  std::set<std::string> all_test = test_words, all_train = train_words;
  // Math: per template, as its families are held out per template (the test-only templates div and ages
  // are held out whole and, as docs/tasks.md says, made of pieces train teaches).
  const std::set<std::string> math_test_families = {"sum_of", "bare", "difference", "product_of", "evaluate",
                                                    "gives",  "trip", "bank",       "groups"};
  std::map<std::string, std::pair<std::set<std::string>, std::set<std::string>>> math_words;  // train, test
  for (const auto& [tmpl, fams] : dt::math_families()) {
    for (const auto& f : fams) {
      const bool test_only = math_test_families.count(f.name) || tmpl == "div" || tmpl == "ages";
      for (const auto& p : f.phrasings) {
        add(test_only ? math_words[tmpl].second : math_words[tmpl].first, p);
        add(test_only ? all_test : all_train, p);
      }
    }
  }
  auto held_out_only = [](const std::set<std::string>& test, const std::set<std::string>& train) {
    std::set<std::string> only;
    for (const auto& w : test) {
      if (!train.count(w)) only.insert(w);
    }
    return only;
  };
  const auto everywhere = held_out_only(all_test, all_train);
  ASSERT_TRUE(everywhere.count("whats") && everywhere.count("hey"))
      << "the restated families lost their words";
  for (const auto* markers : {&dt::casual_prefixes(), &dt::casual_suffixes()}) {
    for (const auto& m : *markers) {
      for (const auto& w : words_of(m)) EXPECT_FALSE(everywhere.count(w)) << "'" << m << "' uses " << w;
    }
  }
  // Bare code requests (generate_options::bare_requests, train only) too; {fn} is not a word.
  for (const auto& p : dt::bare_code_phrasings()) {
    for (const auto& w : words_of(p)) {
      EXPECT_FALSE(everywhere.count(w) || held_out_only(test_words, train_words).count(w))
          << "'" << p << "' uses " << w;
    }
  }
  ASSERT_TRUE(held_out_only(math_words["add"].second, math_words["add"].first).count("sum"));
  for (const auto& [tmpl, phrasings] : dt::math_casual_phrasings()) {
    const auto only = held_out_only(math_words[tmpl].second, math_words[tmpl].first);
    for (const auto& p : phrasings) {
      for (const auto& w : words_of(p)) EXPECT_FALSE(only.count(w)) << tmpl << ": '" << p << "' uses " << w;
    }
  }
  // The math stories (train only) are no template's, so they use no word of a held-out math family (the
  // test-only templates' included) that no train family of any domain uses, and none that only held-out
  // families of any domain use. Their {fields} are not words.
  std::set<std::string> math_test;
  for (const auto& [tmpl, words] : math_words) math_test.insert(words.second.begin(), words.second.end());
  const auto math_held_out = held_out_only(math_test, all_train);
  ASSERT_TRUE(math_held_out.count("older") && math_held_out.count("divided") && math_held_out.count("crates"));
  for (const auto& [kind, parts] : dt::math_story_parts()) {
    for (const auto& p : parts) {
      const std::string text = std::regex_replace(p, std::regex("\\{[a-z]+\\}"), " ");
      for (const auto& w : words_of(text)) {
        EXPECT_FALSE(math_held_out.count(w) || everywhere.count(w)) << kind << ": '" << p << "' uses " << w;
      }
    }
  }
}

// The request up to the case of word initials and a final punctuation mark.
bool same_surface(const std::string& request, const std::string& body) {
  std::string want = request;
  if (body.size() + 1 == want.size() && std::string(".?!").find(want.back()) != std::string::npos) {
    want.pop_back();
  }
  if (body.size() != want.size()) return false;
  for (size_t i = 0; i < want.size(); ++i) {
    const bool initial = i == 0 || want[i - 1] == ' ';
    if (initial ? std::tolower(static_cast<unsigned char>(body[i])) !=
                      std::tolower(static_cast<unsigned char>(want[i]))
                : body[i] != want[i]) {
      return false;
    }
  }
  return true;
}

// casualize changes only the surface: taken apart into marker, body and marker, the body is the request up
// to the case of word initials and a final punctuation mark, and words the reply copies keep their case.
TEST(TaskGenerator, CasualRewriteChangesOnlyTheSurface) {
  namespace dt = moxi::eval::detail;
  dt::rng r(5);
  int prefixed = 0, suffixed = 0;
  for (auto d : {domain::terminal, domain::code}) {
    for (const auto& t : generate_tasks(d, split::test, 400, 21)) {
      const std::string request = t.prompt.substr(0, t.prompt.find("\n\n"));
      std::string keep = t.reference + "\n" + t.test;
      for (const auto& f : t.files) keep += "\n" + f.path;
      const std::string out = dt::casualize(r, request, keep);
      ASSERT_NE(out, request);
      // Some marker (or none) before and after, around the request's surface.
      bool matched = false;
      std::vector<std::string> prefixes = dt::casual_prefixes(), suffixes = dt::casual_suffixes();
      prefixes.push_back("");
      suffixes.push_back("");
      for (const auto& p : prefixes) {
        for (const auto& x : suffixes) {
          if (matched || out.size() < p.size() + x.size() || out.rfind(p, 0) != 0 ||
              out.compare(out.size() - x.size(), x.size(), x) != 0) {
            continue;
          }
          if (same_surface(request, out.substr(p.size(), out.size() - p.size() - x.size()))) {
            matched = true;
            prefixed += !p.empty();
            suffixed += !x.empty();
          }
        }
      }
      EXPECT_TRUE(matched) << request << " -> " << out;
      for (const auto& f : t.files) {
        if (request.find(f.path) != std::string::npos) {
          EXPECT_NE(out.find(f.path), std::string::npos) << out;
        }
      }
    }
  }
  EXPECT_GT(prefixed, 100);
  EXPECT_GT(suffixed, 200);
}

TEST(TaskGenerator, UserPromptSetLoadsAndIsNotGenerated) {
  const auto tasks = read_jsonl(std::string(MOXI_SOURCE_DIR) + "/tasks/user-prompts.jsonl");
  std::map<domain, int> per_domain;
  std::set<std::string> ids, prompts;
  for (const auto& t : tasks) {
    ++per_domain[t.domain];
    EXPECT_TRUE(ids.insert(t.id).second) << "repeated id " << t.id;
    EXPECT_TRUE(prompts.insert(t.prompt).second) << "repeated prompt " << t.prompt;
    EXPECT_EQ(t.split, split::test) << t.id;
    EXPECT_TRUE(t.template_name == "user-taught" || t.template_name == "user-new") << t.id;
    if (t.domain == domain::terminal) {
      EXPECT_FALSE(t.files.empty()) << t.id;
    }
  }
  EXPECT_GE(per_domain[domain::terminal] + per_domain[domain::code], 40);
  EXPECT_GE(per_domain[domain::math], 10);
  // A `user-taught` bug report pastes one of the twenty trained functions with its trained slip (docstring
  // or not); a `user-new` one pastes a program no trained template writes.
  auto without_docstring = [](const std::string& program) {
    std::string out, line;
    std::istringstream in(program);
    while (std::getline(in, line))
      if (line.find("\"\"\"") == std::string::npos) out += line + "\n";
    return out;
  };
  std::set<std::string> trained;
  for (const auto& t : generate_tasks(domain::code, split::train, 4000, 5, {"shared"}))
    trained.insert(without_docstring(t.program));
  EXPECT_EQ(trained.size(), 20u);
  for (const auto& t : tasks) {
    if (t.domain != domain::code) continue;
    EXPECT_EQ(trained.count(without_docstring(t.program)), t.template_name == "user-taught" ? 1u : 0u)
        << t.id << " (" << t.template_name << "):\n" << t.program;
  }
  for (auto d : kDomains) {
    for (auto s : {split::train, split::test}) {
      for (const auto& t : generate_tasks(d, s, 2000, 1)) {
        EXPECT_FALSE(prompts.count(t.prompt)) << t.id << " generates a hand-written prompt: " << t.prompt;
      }
    }
  }
}

}  // namespace

// Composed code items (docs/tasks.md "Composed code items"): train only, hundreds of distinct programs of
// every documented shape, one bug below the def line, and no held-out function among them: not a
// test-only template's nor a hand-written user prompt's function, nor a construct only those use.
TEST(TaskGenerator, ComposedCodeIsVariedAndHoldsOutTestFunctions) {
  EXPECT_THROW(generate_tasks(domain::code, split::test, 1, 1, {"composed"}), moxi::error);
  std::set<std::string> held_out = {"count_vowels", "to_fahrenheit", "second_largest"};
  // The user bug reports of functions training never shows (`user-new`; the `user-taught` ones paste a
  // trained function with its trained slip).
  for (const auto& t : read_jsonl(std::string(MOXI_SOURCE_DIR) + "/tasks/user-prompts.jsonl")) {
    if (t.domain != domain::code || t.template_name != "user-new") continue;
    ASSERT_EQ(t.program.rfind("def ", 0), 0u) << t.id;
    held_out.insert(t.program.substr(4, t.program.find('(') - 4));
  }
  EXPECT_EQ(held_out.size(), 12u);  // 3 templates + 9 user prompts
  const std::set<std::string> shapes_doc = {
      "filter",  "range",        "extreme-loop", "extreme-builtin", "extreme-args", "formula", "index",
      "charset", "early-return", "words",        "slice",           "parity",       "order"};
  // Constructs of the held-out functions: vowel sets, step slices and reversal, Fahrenheit's 9 / 5 and
  // 5 / 9, a sorted list indexed (second largest), lists of word lengths, split(" "), a target compared
  // by equality, a None for division by zero, Fibonacci.
  const std::regex banned(
      R"(aeio|\[::|reversed\(|9 / 5|5 / 9|sorted\([^)]*\)\[|\[len\([a-z]+\) for|split\(" "\)|target|None|fib)");
  const auto items = generate_tasks(domain::code, split::train, 1000, 4, {"composed"});
  std::set<std::string> programs, fns, shapes, params;
  for (const auto& t : items) {
    ASSERT_EQ(t.template_name, "composed");
    programs.insert(t.program);
    ASSERT_EQ(t.program.rfind("def ", 0), 0u) << t.id;
    const std::string fn = t.program.substr(4, t.program.find('(') - 4);
    fns.insert(fn);
    // Parameter names: "def f(a, b):" -> a, b.
    const size_t open = t.program.find('(');
    const std::string args = t.program.substr(open + 1, t.program.find("):") - open - 1);
    for (size_t at = 0; at <= args.size();) {
      const size_t comma = std::min(args.find(", ", at), args.size());
      params.insert(args.substr(at, comma - at));
      at = comma + 2;
    }
    shapes.insert(t.params.at("shape").get<std::string>());
    EXPECT_FALSE(held_out.count(fn)) << t.id << " writes held-out function " << fn;
    EXPECT_FALSE(std::regex_search(t.program, banned)) << t.id << ":\n" << t.program;
    EXPECT_FALSE(std::regex_search(t.reference, banned)) << t.id << ":\n" << t.reference;
    if (t.params.at("shape") == "filter") {
      EXPECT_EQ(t.program.find("% 2"), std::string::npos) << t.id;  // a sum of even numbers
    }
    EXPECT_NE(t.test.find("from solution import " + fn + "\n"), std::string::npos) << t.id;
    size_t a = 0;
    while (a < t.program.size() && t.program[a] == t.reference[a]) ++a;
    EXPECT_GT(a, t.program.find('\n')) << t.id << ": the def line changed";
    // The prompt shows the program and one tested call with its value.
    EXPECT_NE(t.prompt.find("\n\n" + t.program), std::string::npos) << t.id;
    EXPECT_LT(t.prompt.find(fn + "("), t.prompt.find("\n\n")) << t.id;
  }
  EXPECT_EQ(shapes, shapes_doc);
  // The twenty fixed templates give at most 40 programs (with and without their docstrings).
  EXPECT_GE(programs.size(), 750u) << "composed programs repeat";
  // Two thirds of the function names and half the parameter names are made up, nearly all new each time
  // (measured: 792 function names, 485 parameter names).
  EXPECT_GE(fns.size(), 600u) << "few function names";
  EXPECT_GE(params.size(), 300u) << "few parameter names";
}
