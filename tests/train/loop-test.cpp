// The iterative loop (`moxi train loop`) from the bundled moxi-small on a handful of tasks: two rounds write
// their data, models, eval reports and summaries, the collected successes really pass their checkers and
// the round-2 start is round 1's model; a loop killed mid-round resumes at the unfinished stage; stage
// fragments that try to set what the loop owns are refused.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/eval/check.h"
#include "moxi/eval/task.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

const std::string kSource = MOXI_SOURCE_DIR, kBinary = MOXI_BINARY_DIR;
using moxi::testing::read_file;
using moxi::testing::spawn_logged;
using moxi::testing::wait_exit;

nlohmann::json loop_json(int64_t rounds) {
  return {
      {"seed", 2},
      {"threads", 1},
      {"model", {{"init", kSource + "/models/moxi-small"}}},
      {"rounds", rounds},
      {"collect",
       {{"data",
         {{{"domain", "code"}, {"n", 4}, {"seed", 1}},
          {{"domain", "math"}, {"n", 4}, {"seed", 1}},
          {{"domain", "terminal"}, {"n", 6}, {"seed", 2}}}},
        {"samples", 3},
        {"max_tokens", 64}}},
      {"eval",
       {{"data", {{{"domain", "code"}, {"split", "test"}, {"n", 4}, {"seed", 3}}}}, {"max_tokens", 64}}},
      {"sft",
       {{"optimizer", {{"steps", 2}, {"batch_size", 2}, {"lr", 1e-4}, {"min_lr", 1e-5}, {"warmup_steps", 0}}},
        {"checkpoint_every", 1}}},
      {"rl",
       {{"rollout", {{"prompts", 2}, {"samples", 3}, {"max_tokens", 64}}},
        {"reward", {{"correct", 1}, {"format", 0.2}}},
        {"optimizer", {{"steps", 1}, {"lr", 1e-5}}}}}};
}

std::string write_recipe(const std::string& dir, const nlohmann::json& j) {
  const std::string p = dir + "/loop.json";
  std::ofstream(p) << j.dump(2);
  return p;
}

std::vector<eval::task> read_tasks(const std::string& path) {
  return fs::file_size(path) > 0 ? eval::read_jsonl(path) : std::vector<eval::task>{};
}

TEST(LoopRun, TwoRoundsWriteDataModelsReportsAndSummaries) {
  moxi::testing::temp_dir tmp("moxi-loop");
  const auto recipe = write_recipe(tmp.path(), loop_json(2));
  const std::string out = tmp / "loop";
  const auto r =
      moxi::testing::run_shell(kBinary + "/moxi train loop --recipe " + recipe + " --out " + out + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("loop: round 2/2: eval"), std::string::npos) << r.out;
  std::string previous = kSource + "/models/moxi-small";
  eval::checker checker;
  for (int k = 1; k <= 2; ++k) {
    const std::string dir = out + "/round-" + std::to_string(k);
    const auto s = nlohmann::json::parse(read_file(dir + "/summary.json"));
    EXPECT_EQ(s.at("round").get<int>(), k);
    EXPECT_EQ(fs::path(s.at("start_model").get<std::string>()).lexically_normal(),
              fs::path(previous).lexically_normal());
    const auto& c = s.at("collect");
    EXPECT_EQ(c.at("tasks").get<int64_t>(), 14);
    EXPECT_EQ(c.at("samples").get<int64_t>(), 14 * 3);
    const auto successes = read_tasks(dir + "/successes.jsonl"),
               failures = read_tasks(dir + "/failures.jsonl");
    EXPECT_EQ(int64_t(successes.size()), c.at("successes").get<int64_t>());
    EXPECT_EQ(int64_t(failures.size()), c.at("failures").get<int64_t>());
    // Rejection sampling keeps replies that pass: each success's new reference passes its checker.
    for (const auto& t : successes)
      EXPECT_TRUE(checker.check(t, t.reference).pass) << t.id << ": " << t.reference;
    EXPECT_EQ(fs::exists(dir + "/sft/model/model.safetensors"), !successes.empty());
    EXPECT_EQ(fs::exists(dir + "/rl/model/model.safetensors"), !failures.empty());
    // Both models judged on the same fresh held-out tasks, paired.
    const auto& cmp = s.at("eval").at("comparison");
    EXPECT_EQ(cmp.at("overall").at("n").get<int64_t>() + cmp.at("unpaired").get<int64_t>(), 4);
    EXPECT_TRUE(fs::exists(dir + "/eval-before.json"));
    EXPECT_TRUE(fs::exists(dir + "/eval-after.json"));
    previous = s.at("model").get<std::string>();
  }
  // Rounds draw their own tasks.
  EXPECT_NE(read_file(out + "/round-1/failures.jsonl") + read_file(out + "/round-1/successes.jsonl"),
            read_file(out + "/round-2/failures.jsonl") + read_file(out + "/round-2/successes.jsonl"));
}

TEST(LoopRun, AKilledLoopResumesAtTheUnfinishedStage) {
  moxi::testing::temp_dir tmp("moxi-loop-resume");
  const auto recipe = write_recipe(tmp.path(), loop_json(1));
  const std::string out = tmp / "loop";
  const std::vector<std::string> cmd = {kBinary + "/moxi-train", "loop", "--recipe", recipe, "--out", out};
  const pid_t pid = spawn_logged(cmd, tmp / "a.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (!fs::exists(out + "/round-1/collect.json") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  ASSERT_TRUE(fs::exists(out + "/round-1/collect.json")) << read_file(tmp / "a.log");
  ASSERT_FALSE(fs::exists(out + "/round-1/summary.json")) << "the round ended before it could be killed";
  const auto collected = read_file(out + "/round-1/successes.jsonl");
  ASSERT_EQ(wait_exit(spawn_logged(cmd, tmp / "b.log")), 0) << read_file(tmp / "b.log");
  EXPECT_NE(read_file(tmp / "b.log").find("collect: done before"), std::string::npos)
      << read_file(tmp / "b.log");
  EXPECT_EQ(read_file(out + "/round-1/successes.jsonl"), collected);
  EXPECT_TRUE(fs::exists(out + "/round-1/summary.json"));
  // A finished round is not run again.
  ASSERT_EQ(wait_exit(spawn_logged(cmd, tmp / "c.log")), 0) << read_file(tmp / "c.log");
  EXPECT_NE(read_file(tmp / "c.log").find("round 1/1: done before"), std::string::npos)
      << read_file(tmp / "c.log");
}

TEST(LoopRun, StageFragmentsCannotSetWhatTheLoopOwns) {
  moxi::testing::temp_dir tmp("moxi-loop-bad");
  auto j = loop_json(1);
  j["sft"]["model"] = {{"init", "/elsewhere"}};
  auto r = moxi::testing::run_shell(kBinary + "/moxi train loop --recipe " + write_recipe(tmp.path(), j) +
                                    " --out " + (tmp / "o") + " 2>&1");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("sft.model: set by the loop"), std::string::npos) << r.out;
  j = loop_json(1);
  j["rl"]["data"] = {{"train", {"/x.jsonl"}}};
  r = moxi::testing::run_shell(kBinary + "/moxi train loop --recipe " + write_recipe(tmp.path(), j) +
                               " --out " + (tmp / "o") + " 2>&1");
  EXPECT_NE(r.out.find("rl.data.train: set by the loop"), std::string::npos) << r.out;
  j = loop_json(1);
  j.erase("sft");
  j.erase("rl");
  r = moxi::testing::run_shell(kBinary + "/moxi train loop --recipe " + write_recipe(tmp.path(), j) +
                               " --out " + (tmp / "o") + " 2>&1");
  EXPECT_NE(r.out.find("needs an \"sft\" or an \"rl\" stage"), std::string::npos) << r.out;
}

}  // namespace
