// `moxi eval` end to end on a random tiny checkpoint: tasks from `moxi data`, the --json report parsed
// back (counts per domain add up to the task file's domains, each record's verdict is its checker's, the
// pass rate is passed / judged), --out, --baseline against itself (nothing fixed or broken), and bad input
// (task files name line and field; --model is required).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"

namespace {

using result = moxi::testing::command_result;

result run(const std::string& args, const std::string& dir) {
  return moxi::testing::run_moxi(args, "", dir);
}

using moxi::testing::read_file;  // common/read-file.h

class EvalCli : public moxi::testing::temp_dir_test {
 protected:
  void SetUp() override {
    auto r = run("init --config " + std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json --out " +
                     path("m") + " --seed 8",
                 dir_);
    ASSERT_EQ(r.code, 0) << r.err;
    std::string all;
    for (const char* d : {"math", "terminal", "code"}) {
      r = run(std::string("data --domain ") + d + " --split test --n 2 --seed 3 --out " + path(d) + ".jsonl",
              dir_);
      ASSERT_EQ(r.code, 0) << r.err;
      all += read_file(path(d) + ".jsonl");
    }
    std::ofstream(path("tasks.jsonl")) << all;
  }
};

TEST_F(EvalCli, JsonReportCountsTheTasksPerDomain) {
  const auto r = run("eval --model " + path("m") + " --tasks " + path("tasks.jsonl") +
                         " --json --max-tokens 6 --out " + path("records.jsonl"),
                     dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("records").size(), 6u);
  std::map<std::string, int> n, passed, errors;
  for (const auto& rec : j.at("records")) {
    const std::string d = rec.at("domain");
    ++n[d];
    passed[d] += rec.at("pass").get<bool>();
    errors[d] += rec.at("error").get<bool>();
    EXPECT_LE(rec.at("reply_tokens").get<int>(), 6);
    EXPECT_FALSE(rec.at("detail").get<std::string>().empty()) << "every verdict has a reason";
  }
  for (const char* d : {"math", "terminal", "code"}) {
    const auto& s = j.at("domains").at(d);
    EXPECT_EQ(s.at("n").get<int>(), 2) << d;
    EXPECT_EQ(s.at("passed").get<int>(), passed[d]) << d;
    EXPECT_EQ(s.at("errors").get<int>(), errors[d]) << d;
    const int judged = 2 - errors[d];
    EXPECT_DOUBLE_EQ(s.at("pass_rate").get<double>(), judged ? double(passed[d]) / judged : 0.0) << d;
  }
  EXPECT_EQ(j.at("overall").at("n").get<int>(), 6);
  EXPECT_EQ(j.at("max_tokens").get<int>(), 6);
  // --out holds the same records, one per line.
  std::istringstream lines(read_file(path("records.jsonl")));
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) EXPECT_EQ(nlohmann::json::parse(line), j.at("records").at(i++));
  EXPECT_EQ(i, 6u);

  // Against itself: every task paired, nothing fixed or broken.
  std::ofstream(path("base.json")) << r.out;
  const auto c = run("eval --model " + path("m") + " --tasks " + path("tasks.jsonl") +
                         " --json -q --max-tokens 6 --baseline " + path("base.json"),
                     dir_);
  ASSERT_EQ(c.code, 0) << c.err;
  const auto cmp = nlohmann::json::parse(c.out).at("comparison");
  EXPECT_EQ(cmp.at("overall").at("n").get<int>(), 6 - j.at("overall").at("errors").get<int>());
  EXPECT_EQ(cmp.at("overall").at("fixed").get<int>(), 0);
  EXPECT_EQ(cmp.at("overall").at("broken").get<int>(), 0);
  EXPECT_EQ(cmp.at("overall").at("net_improvement_rate").get<double>(), 0.0);
  EXPECT_EQ(cmp.at("pass_rate_delta").get<double>(), 0.0);

  // The table form leads with the paired figure, then the raw pass rates with the unpaired count.
  const auto ct = run("eval -m " + path("m") + " --tasks " + path("tasks.jsonl") +
                          " -q --max-tokens 6 --baseline " + path("base.json"),
                      dir_);
  ASSERT_EQ(ct.code, 0) << ct.err;
  const auto head = ct.out.find(
      "vs baseline " + path("base.json") + ", over " + std::to_string(cmp.at("overall").at("n").get<int>()) +
      " paired tasks: net improvement +0.0 points (95% interval +0.0 to +0.0); 0 fixed, "
      "0 broken");
  const auto raw = ct.out.find("raw pass rates (each report over its own judged tasks; 0 tasks unpaired)");
  EXPECT_NE(head, std::string::npos) << ct.out;
  EXPECT_NE(raw, std::string::npos) << ct.out;
  EXPECT_LT(head, raw) << ct.out;

  // Like for like against its own records (--out): every stratum the same, so no gap, and the standardized
  // rate is the run's own. The same file twice is refused, naming the repeated task.
  const auto l = run("eval --model " + path("m") + " --tasks " + path("tasks.jsonl") +
                         " --json -q --max-tokens 6 --like-for-like " + path("records.jsonl"),
                     dir_);
  ASSERT_EQ(l.code, 0) << l.err;
  const auto lfl = nlohmann::json::parse(l.out).at("like_for_like");
  EXPECT_EQ(lfl.at("n").get<int>(), 6 - j.at("overall").at("errors").get<int>());
  EXPECT_EQ(lfl.at("uncovered").get<int>(), 0);
  EXPECT_NEAR(lfl.at("gap").get<double>(), 0.0, 1e-12);
  EXPECT_NEAR(lfl.at("standardized_rate").get<double>(), lfl.at("target_rate").get<double>(), 1e-12);
  EXPECT_NEAR(lfl.at("crude_reference_rate").get<double>(), j.at("overall").at("pass_rate").get<double>(), 1e-12);
  const auto twice = run("eval --model " + path("m") + " --tasks " + path("tasks.jsonl") +
                             " -q --max-tokens 6 --like-for-like " + path("records.jsonl") + " " +
                             path("records.jsonl"),
                         dir_);
  EXPECT_NE(twice.code, 0);
  EXPECT_NE(twice.err.find("is already in the reference"), std::string::npos) << twice.err;

  // --show-failures 1 names the first failed task of each domain (greedy: the same replies as above).
  const auto f = run("eval --model " + path("m") + " --tasks " + path("tasks.jsonl") +
                         " -q --max-tokens 6 --show-failures 1",
                     dir_);
  ASSERT_EQ(f.code, 0) << f.err;
  std::map<std::string, std::string> first_failed;
  for (const auto& rec : j.at("records"))
    if (!rec.at("pass").get<bool>() && !rec.at("error").get<bool>())
      first_failed.emplace(rec.at("domain").get<std::string>(), rec.at("id").get<std::string>());
  for (const auto& [d, id] : first_failed)
    EXPECT_NE(f.out.find("\n" + id + " ("), std::string::npos) << d << f.out;

  // The table form names every domain and the overall row.
  const auto t = run(
      "eval --model " + path("m") + " --tasks " + path("tasks.jsonl") + " -q --max-tokens 2 --max-tasks 2",
      dir_);
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("math"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("overall"), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("terminal"), std::string::npos) << "--max-tasks 2 keeps the two math tasks: " << t.out;
}

// The bundled default model (models/moxi-small) through `moxi eval` on a handful of tasks of every domain,
// follow-ups and the hand-written set included: it loads, answers each, and the report has one entry per
// domain whose counts add up. Pass rates are measured in its model card and the demo, never asserted.
TEST_F(EvalCli, BundledModelSmokeRun) {
  const std::string model = std::string(MOXI_SOURCE_DIR) + "/models/moxi-small";
  std::string all;
  for (const char* d : {"math", "terminal", "code", "chat"}) {
    const auto r =
        run(std::string("data --domain ") + d + " --split test --n 3 --seed 11 --out " + path(d) + "-s.jsonl",
            dir_);
    ASSERT_EQ(r.code, 0) << r.err;
    all += read_file(path(d) + "-s.jsonl");
  }
  std::istringstream user(read_file(std::string(MOXI_SOURCE_DIR) + "/tasks/user-prompts.jsonl"));
  std::string line;
  for (int i = 0; i < 3 && std::getline(user, line); ++i) all += line + "\n";
  std::ofstream(path("smoke.jsonl")) << all;
  const auto r = run("eval --model " + model + " --tasks " + path("smoke.jsonl") + " --json", dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("records").size(), 15u);
  int total = 0;
  for (const char* d : {"math", "terminal", "code", "chat"}) {
    const auto& s = j.at("domains").at(d);
    EXPECT_GE(s.at("n").get<int>(), 3) << d;
    EXPECT_LE(s.at("passed").get<int>() + s.at("errors").get<int>(), s.at("n").get<int>()) << d;
    EXPECT_EQ(s.at("errors").get<int>(), 0) << d << ": " << r.out;
    total += s.at("n").get<int>();
  }
  EXPECT_EQ(total, 15);
  for (const auto& rec : j.at("records")) {
    EXPECT_GT(rec.at("reply_tokens").get<int>(), 0) << rec.dump();
    EXPECT_FALSE(rec.at("detail").get<std::string>().empty()) << rec.dump();
  }
}

TEST_F(EvalCli, BadInputIsAClearError) {
  std::ofstream(path("bad.jsonl")) << read_file(path("math.jsonl"))
                                   << "{\"id\": \"x\", \"domain\": \"math\"}\n";
  auto r = run("eval --model " + path("m") + " --tasks " + path("bad.jsonl"), dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find(path("bad.jsonl") + ":3: field 'split'"), std::string::npos) << r.err;

  r = run("eval --tasks " + path("math.jsonl"), dir_);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--model"), std::string::npos) << r.err;

  std::ofstream(path("not-a-report.json")) << "{\"model\": \"m\"}";
  r = run("eval --model " + path("m") + " --tasks " + path("math.jsonl") + " --baseline " +
              path("not-a-report.json"),
          dir_);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("missing field \"max_tokens\""), std::string::npos) << r.err;
}

}  // namespace
