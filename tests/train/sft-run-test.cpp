// Whole SFT runs of `moxi train sft` on a tiny config: a run killed with SIGKILL in the middle and
// resumed reaches exactly the parameters of an uninterrupted run (1 thread, same seed), a short run's
// held-out loss drops, and `moxi train` runs moxi-train from its own directory or says why it cannot.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/train/model.h"
#include "moxi/train/recipe.h"
#include "moxi/train/sft.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

const std::string kSource = MOXI_SOURCE_DIR, kBinary = MOXI_BINARY_DIR;

using moxi::testing::read_file;  // common/read-file.h

// A recipe for a few seconds of training: tiny-seed (KDA + Gated DSA, MoE, MTP, MXFP4 experts), terminal
// tasks, a tokenizer trained on them, checkpoints every 2 steps, a QAT phase at the end.
std::string write_recipe(const std::string& dir, int64_t steps, int64_t qat_steps) {
  const nlohmann::json r = {
      {"seed", 3},
      {"threads", 1},
      {"model", {{"config", kSource + "/configs/tiny-seed.json"}}},
      {"chat_template", kSource + "/configs/chat-templates/moxi-tiny.jinja"},
      {"data",
       {{"train", {{{"domain", "terminal"}, {"n", 64}, {"seed", 1}}}},
        {"eval", {{{"domain", "terminal"}, {"split", "test"}, {"n", 8}, {"seed", 2}}}},
        {"max_tokens", 96}}},
      {"optimizer",
       {{"batch_size", 4}, {"steps", steps}, {"lr", 3e-3}, {"min_lr", 3e-4}, {"warmup_steps", 2}}},
      {"eval", {{"every", 0}}},
      {"qat", {{"steps", qat_steps}, {"lr", 1e-3}}},
      {"checkpoint_every", 2},
      {"log_every", 1}};
  const std::string path = dir + "/recipe.json";
  std::ofstream(path) << r.dump(2);
  return path;
}

using moxi::testing::spawn_logged;  // common/run-moxi.h
using moxi::testing::wait_exit;

int64_t latest_step(const std::string& out) {
  const std::string p = out + "/checkpoints/latest";
  if (!fs::exists(p)) return -1;
  const auto s = read_file(p);
  return s.rfind("step-", 0) == 0 ? std::stoll(s.substr(5)) : -1;
}

TEST(SftRun, KilledAndResumedRunEndsWithExactlyTheUninterruptedParameters) {
  moxi::testing::temp_dir tmp("moxi-sft-resume");
  const auto recipe = write_recipe(tmp.path(), 10, 2);
  const std::string trainer = kBinary + "/moxi-train";
  auto cmd = [&](const std::string& out) {
    return std::vector<std::string>{trainer, "sft", "--recipe", recipe, "--out", out};
  };
  const std::string a = tmp / "a", b = tmp / "b";
  ASSERT_EQ(wait_exit(spawn_logged(cmd(a), tmp / "a.log")), 0) << read_file(tmp / "a.log");

  // Kill the second run once it has checkpointed step 4 (it is then somewhere in steps 5..12).
  const pid_t pid = spawn_logged(cmd(b), tmp / "b1.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (latest_step(b) < 4 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGKILL);
  ASSERT_EQ(wait_exit(pid), 128 + SIGKILL) << read_file(tmp / "b1.log");
  const int64_t killed_at = latest_step(b);
  ASSERT_GE(killed_at, 4);
  ASSERT_LT(killed_at, 12) << "the run finished before it could be killed";

  ASSERT_EQ(wait_exit(spawn_logged(cmd(b), tmp / "b2.log")), 0) << read_file(tmp / "b2.log");
  EXPECT_NE(read_file(tmp / "b2.log").find("resuming from"), std::string::npos) << read_file(tmp / "b2.log");
  ASSERT_EQ(latest_step(a), 12);
  ASSERT_EQ(latest_step(b), 12);
  const auto ma = train::train_model::load(a + "/checkpoints/step-00000012");
  const auto mb = train::train_model::load(b + "/checkpoints/step-00000012");
  int64_t compared = 0;
  for (const auto& [name, p] : ma.params()) {
    EXPECT_TRUE(torch::equal(p, mb.params().at(name)))
        << name << " differs after resume (killed at step " << killed_at << ")";
    ++compared;
  }
  EXPECT_EQ(compared, int64_t(ma.manifest().size()));
  // The exports (after QAT) are byte-identical too.
  EXPECT_EQ(read_file(a + "/model/model.safetensors"), read_file(b + "/model/model.safetensors"));
}

TEST(SftRun, ShortRunLowersTheHeldOutLossAndExportsAServableModel) {
  moxi::testing::temp_dir tmp("moxi-sft-short");
  auto r = train::load_recipe(write_recipe(tmp.path(), 40, 4));
  train::set_field(r, "out", tmp / "run");
  train::set_field(r, "checkpoint_every", 100);
  // Held out: unseen conversations of the training distribution (another seed). The test split holds out
  // templates and parameter ranges, which a 40-step run is not expected to learn.
  train::set_field(
      r, "data.eval",
      nlohmann::json::array({{{"domain", "terminal"}, {"split", "train"}, {"n", 16}, {"seed", 99}}}));
  const auto res = train::run_sft(r);
  EXPECT_EQ(res.steps_done, 44);
  // log.jsonl: the held-out loss before training (step 0) and after.
  std::ifstream log(tmp / "run/log.jsonl");
  std::vector<double> evals;
  for (std::string line; std::getline(log, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("eval_loss")) evals.push_back(j["eval_loss"].get<double>());
  }
  ASSERT_GE(evals.size(), 2u);
  // 40 steps take the loss from ~6.3 to ~4.4 (made-up file names over every letter keep it from falling
  // further); a trainer that does not learn stays near the start.
  EXPECT_LT(evals.back(), 0.8 * evals.front()) << "held-out loss " << evals.front() << " -> " << evals.back();
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"})
    EXPECT_TRUE(fs::exists(tmp / ("run/model/" + std::string(f)))) << f;
  EXPECT_TRUE(fs::exists(tmp / "run/model-sft/model.safetensors"));
}

TEST(SftRun, MoxiTrainRunsTheTrainerOrExplainsThatItIsMissing) {
  moxi::testing::temp_dir tmp("moxi-train-cli");
  ASSERT_EQ(wait_exit(spawn_logged({kBinary + "/moxi", "train", "sft", "--help"}, tmp / "help.log")), 0);
  EXPECT_NE(read_file(tmp / "help.log").find("--recipe"), std::string::npos) << read_file(tmp / "help.log");
  // A moxi without moxi-train next to it (a build without libtorch).
  fs::copy_file(kBinary + "/moxi", tmp / "moxi");
  fs::permissions(tmp / "moxi", fs::perms::owner_exec, fs::perm_options::add);
  ASSERT_EQ(wait_exit(spawn_logged({tmp / "moxi", "train", "sft"}, tmp / "missing.log")), 1);
  EXPECT_NE(read_file(tmp / "missing.log").find("built without libtorch"), std::string::npos)
      << read_file(tmp / "missing.log");
}

// A stage recipe whose model.init is not there yet (its first stage not trained): a message that names the
// field and the path, and no run directory left behind.
TEST(SftRun, AMissingInitModelIsNamedAndNothingIsWritten) {
  moxi::testing::temp_dir tmp("moxi-train-init");
  auto r = nlohmann::json::parse(read_file(write_recipe(tmp.path(), 2, 0)));
  r["model"] = {{"init", "first-stage/model"}};
  std::ofstream(tmp / "stage.json") << r.dump(2);
  ASSERT_EQ(wait_exit(spawn_logged(
                {kBinary + "/moxi", "train", "sft", "--recipe", tmp / "stage.json", "--out", tmp / "run"},
                tmp / "init.log")),
            1);
  const std::string log = read_file(tmp / "init.log");
  EXPECT_NE(log.find("model.init '" + tmp / "first-stage/model" + "' is not a model directory"),
            std::string::npos)
      << log;
  EXPECT_FALSE(fs::exists(tmp / "run"));
}

}  // namespace
