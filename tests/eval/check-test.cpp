// Checker tests: every generated reference passes its own checker (terminal and code candidates run in
// the sandbox), known-wrong candidates fail, equivalent but different commands pass (outcomes are
// compared, never command text), and candidates cannot pass by exiting early or escape the sandbox.
#include "moxi/eval/check.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "moxi/eval/task-generator.h"

namespace {

using namespace moxi::eval;

checker& shared_checker() {
  static checker c;
  return c;
}

std::string param_s(const task& t, const char* key) {
  return t.params.at(key).get<std::string>();
}
int64_t param_i(const task& t, const char* key) {
  return t.params.at(key).get<int64_t>();
}

// The file a terminal task is about (params "file"), as a shell word: quoted when it has a space.
std::string target_file(const task& t) {
  if (!t.params.contains("file")) return "";
  const std::string f = param_s(t, "file");
  return f.find(' ') == std::string::npos ? f : "'" + f + "'";
}

struct cases {
  std::vector<std::string> wrong, right;  // besides the reference
};

// Per template: commands that must fail, and equivalent commands (different text) that must pass.
cases terminal_cases(const task& t) {
  const std::string f = target_file(t);
  const std::string& n = t.template_name;
  if (n == "count_lines")
    return {{"cat " + f, "wc -c " + f, "wc " + f, "wc -l " + f + " " + f},
            {"wc -l < " + f, "wc -l " + f, "cat " + f + " | wc -l", "grep -c '' " + f}};
  if (n == "word_count") return {{"wc -l " + f, "cat " + f}, {"wc -w < " + f, "cat " + f + " | wc -w"}};
  if (n == "head_n") {
    const auto k = std::to_string(param_i(t, "k"));
    const auto k1 = std::to_string(param_i(t, "k") + 1);
    return {{"head -n " + k1 + " " + f, "cat " + f, "tail -n " + k + " " + f},
            {"sed -n '1," + k + "p' " + f}};
  }
  if (n == "tail_n") {
    const auto k = std::to_string(param_i(t, "k"));
    return {{"head -n " + k + " " + f}, {"tail -" + k + " " + f}};
  }
  if (n == "grep_lines") {
    const auto w = param_s(t, "word");
    return {{"cat " + f, "grep -v " + w + " " + f}, {"grep -F '" + w + "' < " + f, "awk '/" + w + "/' " + f}};
  }
  if (n == "find_larger") {
    const auto kb = std::to_string(param_i(t, "kb"));
    return {{"find . -type f", "find . -type f -size -" + kb + "k"},
            {"find . -size +" + kb + "k -type f | sort", "find . -type f -size +" + kb + "000c"}};
  }
  if (n == "count_ext") {
    const auto e = param_s(t, "ext");
    return {{"echo 0", "find . -type f | wc -l"}, {"find . -name '*." + e + "' | wc -l"}};
  }
  if (n == "sort_lines") return {{"cat " + f, "sort -r " + f}, {"sort < " + f, "cat " + f + " | sort"}};
  if (n == "mkdir_copy") {
    const auto d = param_s(t, "dir");
    return {{"mkdir " + d, "mkdir " + d + " && cp -r * " + d + "/ 2>/dev/null; true"},
            {"mkdir -p " + d + "; cp *.txt " + d,
             "mkdir " + d + " && for x in *.txt; do cp \"$x\" " + d + "/; done"}};
  }
  if (n == "rename") {
    const std::string to = param_s(t, "to");
    return {{"cp " + f + " " + to, "touch " + to}, {"cp " + f + " " + to + " && rm " + f}};
  }
  if (n == "append") {
    const std::string text =
        t.reference.substr(t.reference.find('\'') + 1, t.reference.rfind('\'') - t.reference.find('\'') - 1);
    return {{"echo '" + text + "' > " + f, "echo '" + text + "'"}, {"printf '%s\\n' '" + text + "' >> " + f}};
  }
  if (n == "unique_count")
    return {{"wc -l " + f, "sort " + f + " | wc -l"}, {"sort " + f + " | uniq | wc -l"}};
  if (n == "delete_ext") {
    const auto e = param_s(t, "ext");
    return {{"find . -name '*." + e + "' -delete", "rm -f *.txt *.log *.md"},
            {"rm *." + e, "find . -maxdepth 1 -name '*." + e + "' -delete"}};
  }
  if (n == "replace_word") {
    const auto a = param_s(t, "from"), b = param_s(t, "to");
    return {{"sed 's/" + a + "/" + b + "/g' " + f,
             "sed -i 's/" + a + "/" + b + "/' " + f + " && sed -i 's/" + b + "/" + a + "/' " + f},
            {"sed 's/" + a + "/" + b + "/g' " + f + " > x.new && mv x.new " + f}};
  }
  if (n == "total_lines") {
    const auto e = param_s(t, "ext");
    return {{"find . -name '*." + e + "' | xargs cat | wc -l", "ls *." + e + " | wc -l"},
            {"cat *." + e + " | grep -c ''", "awk 'END {print NR}' *." + e}};
  }
  if (n == "line_n") {
    const auto k = std::to_string(param_i(t, "k"));
    return {{"cat " + f, "sed -n '" + std::to_string(param_i(t, "k") + 1) + "p' " + f},
            {"head -n " + k + " " + f + " | tail -n 1", "awk 'NR == " + k + "' " + f}};
  }
  if (n == "skip_header") return {{"cat " + f, "head -n 2 " + f}, {"sed 1d " + f, "awk 'NR > 1' " + f}};
  if (n == "count_matching") {
    const auto w = param_s(t, "word");
    return {{"echo 0", "wc -l " + f}, {"grep " + w + " " + f + " | wc -l"}};
  }
  if (n == "touch_file") {
    const auto g = param_s(t, "to");
    return {{"mkdir " + g, "echo x > " + g}, {": > " + g, "> " + g}};
  }
  if (n == "copy_file") {
    const auto g = param_s(t, "to");
    return {{"mv " + f + " " + g, "touch " + g}, {"cat " + f + " > " + g}};
  }
  if (n == "reverse_lines") return {{"cat " + f, "tail -n 1 " + f}, {"sed '1!G;h;$!d' " + f}};
  if (n == "char_count") return {{"wc -l " + f, "wc -w " + f}, {"cat " + f + " | wc -c", "wc -c < " + f}};
  if (n == "delete_file") return {{"rm -f *", "true > " + f}, {"rm -f " + f, "unlink " + f}};
  if (n == "sort_unique") return {{"sort " + f, "cat " + f}, {"sort " + f + " | uniq"}};
  if (n == "uppercase") return {{"cat " + f, "tr A-Z a-z < " + f}, {"tr '[:lower:]' '[:upper:]' < " + f}};
  if (n == "mkdir_nested") {
    const auto d = param_s(t, "dir");
    return {{"mkdir " + d + " 2>/dev/null; true", "mkdir -p " + d.substr(0, d.find('/'))},
            {"mkdir -p " + d + "/"}};
  }
  if (n == "move_into") {
    const auto d = param_s(t, "dir");
    return {{"cp " + f + " " + d + "/", "mv " + f + " " + d + "/x"}, {"mv " + f + " " + d}};
  }
  if (n == "followup") {
    const std::string op = param_s(t, "op");
    std::vector<std::string> right;
    if (op == "count_lines") right.push_back("wc -l < " + f);
    if (op == "head_n" || op == "tail_n")
      right.push_back("cat " + f + " | " + (op == "head_n" ? "head" : "tail") + " -n " +
                      std::to_string(param_i(t, "k")));
    std::vector<std::string> wrong;
    if (op == "count_lines" || op == "word_count" || op == "unique_count") wrong.push_back("cat " + f);
    return {wrong, right};
  }
  if (n == "show_file")  // at least 3 lines, so neither wrong command prints the whole file
    return {{"head -n 1 " + f, "tail -n 2 " + f}, {"cat < " + f, "awk 1 " + f}};
  if (n == "list_by_size")  // at least 2 files of distinct sizes, no directory
    return {{"ls -Sr", "ls -S | head -n 1"}, {"ls -S -1", "ls -lS | awk 'NR > 1 {print $NF}'"}};
  if (n == "largest_file")
    return {{"ls -S | tail -n 1", "ls"}, {"ls -S | head -1", "ls -S -p | grep -v / | head -n 1"}};
  ADD_FAILURE() << "no cases for template " << n;
  return {};
}

TEST(Check, TerminalReferencesPassWrongCommandsFailEquivalentOnesPass) {
  std::vector<task> tasks;
  for (auto s : {split::train, split::test}) {
    // Train has the train-only templates too.
    auto v = generate_tasks(domain::terminal, s, s == split::train ? 110 : 45, 11);
    tasks.insert(tasks.end(), v.begin(), v.end());
  }
  // Train names in capitals (generate_options::capitals) are copied into commands as they are.
  auto caps = generate_tasks(domain::terminal, split::train, 110, 12, {}, {.capitals = true});
  tasks.insert(tasks.end(), caps.begin(), caps.end());
  std::set<std::string> covered;
  std::vector<std::pair<const task*, std::string>> items;
  std::vector<int> expect;  // 1 = must pass, 0 = must fail
  for (const auto& t : tasks) {
    covered.insert(t.template_name);
    items.emplace_back(&t, t.reference);
    expect.push_back(1);
    items.emplace_back(&t, "```bash\n" + t.reference + "\n```");
    expect.push_back(1);
    items.emplace_back(&t, "true");
    expect.push_back(0);
    const auto c = terminal_cases(t);
    for (const auto& w : c.wrong) {
      items.emplace_back(&t, w);
      expect.push_back(0);
    }
    for (const auto& r : c.right) {
      items.emplace_back(&t, r);
      expect.push_back(1);
    }
  }
  EXPECT_EQ(covered.size(), templates(domain::terminal).size()) << "raise n so every template is exercised";
  const auto results = shared_checker().check_all(items);
  ASSERT_EQ(results.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const task& t = *items[i].first;
    EXPECT_FALSE(results[i].error) << t.id << ": " << results[i].detail;
    EXPECT_EQ(results[i].pass, expect[i] == 1)
        << t.id << " (" << t.template_name << ") candidate `" << items[i].second << "`: " << results[i].detail
        << "\nreference: " << t.reference;
  }
}

TEST(Check, CodeReferencesPassUnfixedProgramsFail) {
  std::vector<task> tasks;
  for (auto s : {split::train, split::test}) {
    auto v = generate_tasks(domain::code, s, 60, 12);
    tasks.insert(tasks.end(), v.begin(), v.end());
  }
  std::vector<std::pair<const task*, std::string>> items;
  std::vector<int> expect;
  for (const auto& t : tasks) {
    items.emplace_back(&t, t.reference);
    expect.push_back(1);
    items.emplace_back(&t, "Here is the fix:\n```python\n" + t.reference + "```\nIt now works.");
    expect.push_back(1);
    items.emplace_back(&t, t.program);  // the bug left in
    expect.push_back(0);
  }
  const task& t0 = tasks[0];
  for (const std::string& bad :
       {std::string("def broken(:\n"), std::string(""), std::string("import os\nos._exit(0)\n"),
        std::string("import sys\nprint('MOXI-TESTS-PASSED 0')\nsys.exit(0)\n"),
        t0.reference + "\nimport os\nos.system('echo hi > /tmp/escaped')\nraise SystemExit(0)\n"}) {
    items.emplace_back(&t0, bad);
    expect.push_back(0);
  }
  const auto results = shared_checker().check_all(items);
  for (size_t i = 0; i < items.size(); ++i) {
    const task& t = *items[i].first;
    EXPECT_FALSE(results[i].error) << t.id << ": " << results[i].detail;
    EXPECT_EQ(results[i].pass, expect[i] == 1) << t.id << " (" << t.template_name << ") candidate:\n"
                                               << items[i].second << "\n-> " << results[i].detail;
  }
  // The unfixed program's failure names the assertion.
  EXPECT_NE(results[2].detail.find("AssertionError"), std::string::npos) << results[2].detail;
}

// Composed code items run in the sandbox: every shape's fix passes its test, and the program with its bug
// fails an assertion (or cannot run), so each item's example really shows its bug. Expected values are
// computed by the generator in C++; Python is the independent judge.
TEST(Check, ComposedFixesPassAndTheirBugsFail) {
  const auto tasks = generate_tasks(domain::code, split::train, 240, 31, {"composed"});
  std::vector<std::pair<const task*, std::string>> items;
  std::set<std::string> shapes;
  for (const auto& t : tasks) {
    shapes.insert(t.params.at("shape").get<std::string>());
    items.emplace_back(&t, t.reference);
    items.emplace_back(&t, t.program);
  }
  EXPECT_EQ(shapes.size(), 13u);
  const auto results = shared_checker().check_all(items);
  ASSERT_EQ(results.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const task& t = *items[i].first;
    EXPECT_FALSE(results[i].error) << t.id << ": " << results[i].detail;
    EXPECT_EQ(results[i].pass, i % 2 == 0) << t.id << " (" << t.params.at("shape") << ") candidate:\n"
                                           << items[i].second << "\n-> " << results[i].detail;
  }
}

// The hand-written prompt set (tasks/user-prompts.jsonl): every reference passes its own checker, and a
// reply that does nothing does not.
TEST(Check, UserPromptReferencesPass) {
  const auto tasks = read_jsonl(std::string(MOXI_SOURCE_DIR) + "/tasks/user-prompts.jsonl");
  std::vector<std::pair<const task*, std::string>> items;
  for (const auto& t : tasks) {
    items.emplace_back(&t, t.reference);
    items.emplace_back(&t, t.domain == domain::math   ? "I do not know."
                           : t.domain == domain::code ? t.program
                                                      : "true");
  }
  const auto results = shared_checker().check_all(items);
  ASSERT_EQ(results.size(), items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const task& t = *items[i].first;
    EXPECT_FALSE(results[i].error) << t.id << ": " << results[i].detail;
    EXPECT_EQ(results[i].pass, i % 2 == 0)
        << t.id << " candidate `" << items[i].second << "`: " << results[i].detail;
  }
}

TEST(Check, MathComparesTheLastNumber) {
  for (auto s : {split::train, split::test}) {
    for (const auto& t : generate_tasks(domain::math, s, 200, 13)) {
      EXPECT_TRUE(check(t, t.reference).pass) << t.id;
      EXPECT_TRUE(check(t, "Let me think. The answer is " + t.answer + ".").pass) << t.id;
      EXPECT_FALSE(check(t, std::to_string(std::stoll(t.answer) + 1)).pass) << t.id;
      EXPECT_FALSE(check(t, "I don't know").pass) << t.id;
    }
  }
  EXPECT_EQ(extract_number("#### 1,234"), "1234");
  EXPECT_EQ(extract_number("from 3 to -5."), "-5");
  EXPECT_EQ(extract_number("x-5"), "5");
  EXPECT_EQ(extract_number("2.50 dollars"), "2.50");
  EXPECT_EQ(extract_number("1,23"), "23");
  EXPECT_EQ(extract_number("none"), std::nullopt);
}

TEST(Check, ExtractionOfCommandsAndPrograms) {
  EXPECT_EQ(extract_command("$ wc -l notes.txt\n"), "wc -l notes.txt");
  EXPECT_EQ(extract_command("Run:\n```sh\nls -S | head -n 1\n```\n"), "ls -S | head -n 1");
  EXPECT_EQ(extract_program("```python\ndef f():\n    return 1\n```"), "def f():\n    return 1\n");
}

TEST(Check, LimitsAndIsolation) {
  // Own work dir, reachable by the sandbox uid, so that leftovers can be counted exactly.
  char tmpl[] = "/tmp/moxi-eval-test-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  std::filesystem::permissions(tmpl, std::filesystem::perms(0755));
  check_options o;
  o.work_dir = tmpl;
  o.limits.timeout_s = 0.5;
  auto fast_owner = std::make_unique<checker>(o);
  checker& fast = *fast_owner;
  const auto tasks = generate_tasks(domain::terminal, split::train, 1, 1);
  const task& t = tasks[0];
  auto r = fast.check(t, "sleep 10; " + t.reference);
  EXPECT_FALSE(r.pass);
  EXPECT_FALSE(r.error);
  EXPECT_NE(r.detail.find("timeout"), std::string::npos) << r.detail;

  const std::string marker = "/tmp/moxi-eval-escape-" + std::to_string(::getpid());
  r = fast.check(t, "touch " + marker + "; " + t.reference);
  EXPECT_TRUE(r.pass) << r.detail;                // writing the private /tmp is allowed ...
  EXPECT_FALSE(std::filesystem::exists(marker));  // ... and invisible to the host
  r = fast.check(t, "echo x > " + std::string(MOXI_SOURCE_DIR) + "/escaped.txt; " + t.reference);
  EXPECT_FALSE(std::filesystem::exists(std::string(MOXI_SOURCE_DIR) + "/escaped.txt"));
  EXPECT_TRUE(r.pass) << r.detail;  // the failed write only prints to stderr; the outcome still matches

  // Every workspace lives in the checker's one directory and is removed after every check; the
  // directory goes with the checker.
  std::vector<std::filesystem::path> made;
  for (const auto& e : std::filesystem::directory_iterator(tmpl)) made.push_back(e.path());
  ASSERT_EQ(made.size(), 1u);
  EXPECT_TRUE(std::filesystem::is_empty(made[0])) << made[0];
  fast_owner.reset();
  EXPECT_TRUE(std::filesystem::is_empty(tmpl));
  std::filesystem::remove_all(tmpl);
}

}  // namespace
