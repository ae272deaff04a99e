// Agent run reports: the interval and test statistics against textbook values and fp64 formulas, the
// pairing of two runs, and the HTML page loaded in Debian's headless chromium through puppeteer-core
// (tests/eval/report-browser): no console errors, nothing fetched, the plots laid out, a screenshot.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/eval/agent-report.h"

namespace {
namespace fs = std::filesystem;
using namespace moxi::eval;
using json = nlohmann::json;

TEST(AgentReport, WilsonIntervalMatchesTheTextbook) {
  // Wilson score interval at 95 %: 8/10 -> [0.4902, 0.9433], 0/10 -> [0, 0.2775], 50/100 -> [0.4038, 0.5962]
  // (Newcombe 1998, Table I; Brown, Cai & DasGupta 2001).
  auto [a, b] = wilson95(8, 10);
  EXPECT_NEAR(a, 0.4902, 5e-4);
  EXPECT_NEAR(b, 0.9433, 5e-4);
  std::tie(a, b) = wilson95(0, 10);
  EXPECT_NEAR(a, 0.0, 1e-12);
  EXPECT_NEAR(b, 0.2775, 5e-4);
  std::tie(a, b) = wilson95(50, 100);
  EXPECT_NEAR(a, 0.4038, 5e-4);
  EXPECT_NEAR(b, 0.5962, 5e-4);
  EXPECT_EQ(wilson95(0, 0), std::make_pair(0.0, 0.0));
}

TEST(AgentReport, BootstrapIntervalAndSignTest) {
  paired_outcomes none;
  none.ties = 40;
  EXPECT_EQ(none.bootstrap95(), std::make_pair(0.0, 0.0));
  EXPECT_EQ(none.sign_test_p(), 1.0);
  paired_outcomes all;
  all.wins = 10;
  EXPECT_EQ(all.bootstrap95(), std::make_pair(1.0, 1.0));
  EXPECT_DOUBLE_EQ(all.sign_test_p(), 2.0 / 1024);  // two-sided: 2 * (1/2)^10
  // Many tasks: the bootstrap percentiles approach the normal interval NIR +- 1.96 sqrt((pw + pl - NIR^2)/n).
  paired_outcomes p;
  p.wins = 60, p.losses = 20, p.ties = 120;
  const double n = 200, nir = 0.2, half = 1.96 * std::sqrt((60 / n + 20 / n - nir * nir) / n);
  const auto [lo, hi] = p.bootstrap95();
  EXPECT_NEAR(p.nir(), nir, 1e-12);
  EXPECT_NEAR(lo, nir - half, 0.015);
  EXPECT_NEAR(hi, nir + half, 0.015);
  EXPECT_EQ(p.bootstrap95(), p.bootstrap95()) << "a fixed seed: the same page every time";
  // Sign test of 60 wins vs 20 losses: P(X <= 20 | Bin(80, 1/2)) * 2, in fp64.
  double tail = 0;
  for (int i = 0; i <= 20; ++i)
    tail += std::exp(std::lgamma(81.0) - std::lgamma(i + 1.0) - std::lgamma(81.0 - i) - 80 * std::log(2.0));
  EXPECT_NEAR(p.sign_test_p(), 2 * tail, 1e-15);
}

json record(const std::string& id, const std::string& cat, bool pass, const std::string& error = "") {
  return {{"id", id},       {"category", cat},  {"pass", pass},     {"error", error},   {"turns", 3},
          {"seconds", 1.5}, {"tests_passed", pass ? 2 : 0}, {"tests_total", 2}, {"reply_tokens", 40},
          {"stop", "finished"}};
}

class AgentReportRuns : public moxi::testing::temp_dir_test {
 protected:
  std::string write_run(const std::string& name, const std::string& agent, const std::vector<json>& tasks) {
    const std::string dir = path(name);
    fs::create_directories(dir + "/trajectories");
    json r = {{"agent", agent}, {"seconds", 12.0}, {"tasks", tasks}};
    std::ofstream(dir + "/results.json") << r.dump();
    for (const auto& t : tasks) std::ofstream(dir + "/trajectories/" + t["id"].get<std::string>() + ".jsonl") << "{}\n";
    return dir;
  }
};

TEST_F(AgentReportRuns, PairsTasksByIdAndLeavesErrorsOut) {
  const auto a = write_run("a", "model:sft", {record("w1", "work", false), record("w2", "work", true),
                                              record("c1", "coding", false), record("c2", "coding", true, "sandbox"),
                                              record("only-a", "chat", true)});
  const auto b = write_run("b", "model:rl", {record("w1", "work", true), record("w2", "work", true),
                                             record("c1", "coding", false), record("c2", "coding", true),
                                             record("only-b", "chat", false)});
  const auto j = agent_report_json({read_agent_run(a), read_agent_run(b)});
  const auto& ra = j["runs"][0]["categories"];
  EXPECT_EQ(ra["overall"]["tasks"], 5);
  EXPECT_EQ(ra["overall"]["errors"], 1);
  EXPECT_DOUBLE_EQ(ra["overall"]["pass_rate"].get<double>(), 2.0 / 4);  // errors are not judged
  const auto& c = j["comparisons"][0]["categories"];
  EXPECT_EQ(c["overall"]["paired"], 3);  // w1, w2, c1: c2 has an error, only-a/only-b are unpaired
  EXPECT_EQ(c["overall"]["wins"], 1);
  EXPECT_EQ(c["overall"]["losses"], 0);
  EXPECT_EQ(c["overall"]["ties"], 2);
  EXPECT_DOUBLE_EQ(c["overall"]["net_improvement_rate"].get<double>(), 1.0 / 3);
  EXPECT_EQ(c["work"]["wins"], 1);
  EXPECT_EQ(c["coding"]["ties"], 1);
  EXPECT_THROW(read_agent_run(path("missing")), moxi::error);
  fs::create_directories(path("bad"));
  std::ofstream(path("bad/results.json")) << "{\"tasks\": [{\"id\": \"x\"}]}";
  EXPECT_THROW(read_agent_run(path("bad")), moxi::error);
}

// The page in a real browser: Debian's chromium driven by puppeteer-core (scripts/setup-report-test-deps.sh).
TEST_F(AgentReportRuns, ThePageRendersInHeadlessChromium) {
  const std::string dir = std::string(MOXI_SOURCE_DIR) + "/tests/eval/report-browser";
  ASSERT_EQ(std::system("command -v node >/dev/null 2>&1"), 0) << "node is missing: run scripts/setup-report-test-deps.sh";
  ASSERT_TRUE(fs::exists("/usr/bin/chromium")) << "chromium is missing: run scripts/setup-report-test-deps.sh";
  ASSERT_TRUE(fs::exists(dir + "/node_modules/puppeteer-core/package.json"))
      << "puppeteer-core is missing: run scripts/setup-report-test-deps.sh";
  std::vector<json> base, cand;
  for (int i = 0; i < 30; ++i) {
    const std::string cat = i % 3 == 0 ? "work" : i % 3 == 1 ? "coding" : "chat";
    base.push_back(record(cat + "-" + std::to_string(i), cat, i % 4 == 0));
    cand.push_back(record(cat + "-" + std::to_string(i), cat, i % 2 == 0));
    cand.back()["turns"] = i % 7;
  }
  // Text that must be escaped, not interpreted, in the page.
  base.push_back(record("work-x", "work", false, "<script>console.error('injected')</script>"));
  const auto a = write_run("sft", "model:sft", base), b = write_run("rl", "model:rl", cand);
  const std::string html = path("out/report.html");
  fs::create_directories(path("out"));
  std::ofstream(html) << agent_report_html({read_agent_run(a), read_agent_run(b)}, path("out"));
  EXPECT_NE(read_agent_run(a).results.dump().find("<script>"), std::string::npos);
  const std::string shot = path("out/report.png");
  const std::string cmd = "cd '" + dir + "' && timeout 120 node check.mjs '" + html + "' '" + shot + "' 8 2>&1";
  const auto run = moxi::testing::run_shell(cmd);
  const std::string& out = run.out;
  std::printf("%s", out.c_str());
  EXPECT_EQ(run.code, 0) << out;
  EXPECT_EQ(out.find("not ok"), std::string::npos) << out;
  EXPECT_NE(out.find("ok - no console or page errors"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(shot));
  // Links point into the runs' trajectories, relative to the page.
  std::ifstream in(html);
  std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("href=\"../rl/trajectories/work-3.jsonl\""), std::string::npos);
  EXPECT_EQ(page.find("<script>"), std::string::npos);
}

}  // namespace
