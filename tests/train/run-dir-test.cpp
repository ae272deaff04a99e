// What a training run may and may not do to the files around it (docs/train.md, "Run directory"): one run
// per run directory (a second one is refused naming the first one's PID), a resume with another schedule is
// refused unless --override, an export never replaces a model directory the run did not write unless
// --force, --out moves the export and the bundled recipes export under runs/, every checkpoint is a model
// directory the engine's tools load, and an interrupted run checkpoints and prints the command that resumes
// it. The runs are real moxi-train processes on tiny-seed with a handful of steps.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/train/interrupt.h"
#include "moxi/train/loop.h"
#include "moxi/train/recipe.h"
#include "moxi/train/rl-recipe.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

const std::string kSource = MOXI_SOURCE_DIR, kBinary = MOXI_BINARY_DIR;

using moxi::testing::read_file;  // common/read-file.h

// tiny-seed (KDA + Gated DSA, MoE, MTP, MXFP4 experts) on 24 terminal chats, no held-out data (no pass-rate
// evaluation), a checkpoint every 2 steps, no QAT.
std::string write_recipe(const std::string& dir, int64_t steps) {
  const nlohmann::json r = {
      {"seed", 3},
      {"threads", 1},
      {"model", {{"config", kSource + "/configs/tiny-seed.json"}}},
      {"chat_template", kSource + "/configs/chat-templates/moxi-tiny.jinja"},
      {"data", {{"train", {{{"domain", "terminal"}, {"n", 24}, {"seed", 1}}}}, {"max_tokens", 96}}},
      {"optimizer",
       {{"batch_size", 4}, {"steps", steps}, {"lr", 3e-3}, {"min_lr", 3e-4}, {"warmup_steps", 2}}},
      {"eval", {{"every", 0}}},
      {"checkpoint_every", 2},
      {"log_every", 1}};
  const std::string path = dir + "/recipe.json";
  std::ofstream(path) << r.dump(2);
  return path;
}

using moxi::testing::spawn_logged;  // common/run-moxi.h
using moxi::testing::wait_exit;

int run(const std::vector<std::string>& args, const std::string& log) {
  return wait_exit(spawn_logged(args, log));
}

std::vector<std::string> train_cmd(const std::string& recipe, const std::string& out,
                                   std::vector<std::string> extra = {}) {
  std::vector<std::string> c = {kBinary + "/moxi-train", "sft", "--recipe", recipe, "--out", out};
  c.insert(c.end(), extra.begin(), extra.end());
  return c;
}

int64_t latest_step(const std::string& out) {
  const std::string p = out + "/checkpoints/latest";
  if (!fs::exists(p)) return -1;
  const auto s = read_file(p);
  return s.rfind("step-", 0) == 0 ? std::stoll(s.substr(5)) : -1;
}

// The highest training step in OUT/log.jsonl (-1: none yet).
int64_t logged_step(const std::string& out) {
  std::ifstream f(out + "/log.jsonl");
  int64_t step = -1;
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("loss")) step = std::max(step, j["step"].get<int64_t>());
  }
  return step;
}

template <class Pred>
bool wait_for(Pred pred, int seconds = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST(RunDir, SecondTrainingOnTheSameRunDirectoryIsRefusedWithTheFirstOnesPid) {
  moxi::testing::temp_dir tmp("moxi-run-lock");
  const auto recipe = write_recipe(tmp.path(), 100000);  // runs until killed
  const std::string out = tmp / "run";
  const pid_t first = spawn_logged(train_cmd(recipe, out), tmp / "first.log");
  ASSERT_TRUE(wait_for([&] { return logged_step(out) >= 1; })) << read_file(tmp / "first.log");

  ASSERT_EQ(run(train_cmd(recipe, out), tmp / "second.log"), 1) << read_file(tmp / "second.log");
  const auto msg = read_file(tmp / "second.log");
  EXPECT_TRUE(contains(msg, "in use by another training (PID " + std::to_string(first) + ",")) << msg;
  EXPECT_FALSE(contains(msg, "sft: step")) << "the second run trained:\n" << msg;

  ::kill(first, SIGKILL);
  ASSERT_EQ(wait_exit(first), 128 + SIGKILL);
  // The kernel released the dead holder's lock: the directory is free again.
  const int fd = ::open((out + "/lock").c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ::close(fd);
}

TEST(RunDir, ResumeWithAnotherScheduleIsRefusedUnlessOverridden) {
  moxi::testing::temp_dir tmp("moxi-run-override");
  const auto recipe = write_recipe(tmp.path(), 4);
  const std::string out = tmp / "run";
  ASSERT_EQ(run(train_cmd(recipe, out), tmp / "a.log"), 0) << read_file(tmp / "a.log");
  ASSERT_EQ(latest_step(out), 4);
  const auto log_before = read_file(out + "/log.jsonl");

  ASSERT_EQ(run(train_cmd(recipe, out, {"--steps", "6", "--lr", "0.01"}), tmp / "b.log"), 1)
      << read_file(tmp / "b.log");
  const auto msg = read_file(tmp / "b.log");
  EXPECT_TRUE(contains(msg, "optimizer.steps: 4 -> 6")) << msg;
  EXPECT_TRUE(contains(msg, "optimizer.lr: 0.003 -> 0.01")) << msg;
  EXPECT_TRUE(contains(msg, "--override")) << msg;
  EXPECT_EQ(latest_step(out), 4);
  EXPECT_EQ(read_file(out + "/log.jsonl"), log_before) << "a refused resume wrote to the run's log";

  // What does not shape the training may change freely.
  ASSERT_EQ(run(train_cmd(recipe, out, {"--set", "log_every=3", "--threads", "1"}), tmp / "c.log"), 0)
      << read_file(tmp / "c.log");

  ASSERT_EQ(run(train_cmd(recipe, out, {"--steps", "6", "--override"}), tmp / "d.log"), 0)
      << read_file(tmp / "d.log");
  EXPECT_TRUE(contains(read_file(tmp / "d.log"), "resuming from")) << read_file(tmp / "d.log");
  EXPECT_EQ(latest_step(out), 6);
  EXPECT_EQ(logged_step(out), 6);
  // The accepted values became the run's recipe: the same command resumes without --override.
  ASSERT_EQ(run(train_cmd(recipe, out, {"--steps", "6"}), tmp / "e.log"), 0) << read_file(tmp / "e.log");
}

TEST(RunDir, ExportNeverReplacesAModelDirectoryTheRunDidNotWrite) {
  moxi::testing::temp_dir tmp("moxi-run-export");
  const auto recipe = write_recipe(tmp.path(), 2);
  const std::string model = tmp / "models/existing";
  fs::create_directories(model);
  std::ofstream(model + "/config.json") << "{\"the\": \"user's model\"}\n";
  std::ofstream(model + "/model.safetensors") << "weights";
  std::ofstream(model + "/README.md") << "# the card\n";

  ASSERT_EQ(run(train_cmd(recipe, tmp / "a", {"--export", model}), tmp / "a.log"), 1)
      << read_file(tmp / "a.log");
  const auto msg = read_file(tmp / "a.log");
  EXPECT_TRUE(contains(msg, "already holds a model (config.json, model.safetensors)")) << msg;
  EXPECT_TRUE(contains(msg, "--force")) << msg;
  EXPECT_FALSE(fs::exists(tmp / "a/checkpoints/latest")) << "refused only after training";
  EXPECT_EQ(read_file(model + "/config.json"), "{\"the\": \"user's model\"}\n");
  EXPECT_EQ(read_file(model + "/model.safetensors"), "weights");

  // --force replaces the model files and leaves the rest.
  ASSERT_EQ(run(train_cmd(recipe, tmp / "a", {"--export", model, "--force"}), tmp / "b.log"), 0)
      << read_file(tmp / "b.log");
  EXPECT_TRUE(nlohmann::json::parse(read_file(model + "/config.json")).contains("model_type"));
  EXPECT_EQ(read_file(model + "/README.md"), "# the card\n");
  // The run may export there again (a resume, a rerun): it wrote that model itself ...
  ASSERT_EQ(run(train_cmd(recipe, tmp / "a", {"--export", model}), tmp / "c.log"), 0)
      << read_file(tmp / "c.log");
  // ... another run may not.
  const auto exported = read_file(model + "/model.safetensors");
  ASSERT_EQ(run(train_cmd(recipe, tmp / "b", {"--export", model}), tmp / "d.log"), 1)
      << read_file(tmp / "d.log");
  EXPECT_EQ(read_file(model + "/model.safetensors"), exported);
}

TEST(RunDir, OutMovesTheExportAndTheBundledRecipesExportUnderRuns) {
  for (const auto& e : fs::directory_iterator(kSource + "/recipes")) {
    if (e.path().extension() != ".json") continue;
    if (e.path().stem().string().ends_with("-loop")) {  // a loop recipe (docs/rl.md "The loop")
      auto lp = train::load_loop_recipe(e.path().string());
      EXPECT_EQ(fs::path(lp.out).parent_path().filename(), "runs") << e.path();
      continue;
    }
    if (e.path().stem().string().ends_with("-rl")) {  // an RL recipe (docs/rl.md): the same rules
      auto rl = train::load_rl_recipe(e.path().string());
      EXPECT_EQ(fs::path(train::export_target(rl)), fs::path(rl.out) / "model") << e.path();
      train::apply_override(rl, "out=/somewhere/else");
      EXPECT_EQ(train::export_target(rl), "/somewhere/else/model") << e.path();
      train::validate(rl);
      continue;
    }
    auto r = train::load_recipe(e.path().string());
    const auto target = fs::path(train::export_target(r));
    const auto rel = target.lexically_relative(fs::path(kSource) / "models");
    EXPECT_TRUE(rel.empty() || *rel.begin() == "..") << e.path() << " exports into models/: " << target;
    EXPECT_EQ(target, fs::path(r.out) / "model") << e.path();
    train::set_field(r, "out", "/somewhere/else");
    EXPECT_EQ(train::export_target(r), "/somewhere/else/model") << e.path();
    train::set_field(r, "export", "/the/export");
    EXPECT_EQ(train::export_target(r), "/the/export") << e.path();
  }
}

TEST(RunDir, ScheduleDifferencesNameWhatShapesTheTrainingOnly) {
  moxi::testing::temp_dir tmp("moxi-run-diff");
  const auto base = train::load_recipe(write_recipe(tmp.path(), 4));
  auto same = base;
  for (const char* s :
       {"threads=2", "out=/elsewhere", "export=/x", "log_every=7", "checkpoint_every=9", "eval.every=5",
        "eval.pass_every=5", "eval.max_new_tokens=3", "data.eval=[{\"domain\": \"math\", \"n\": 2}]"})
    train::apply_override(same, s);
  EXPECT_TRUE(train::schedule_differences(base, same).empty());
  // The saved form (OUT/recipe.json) reads back to the same recipe.
  const auto saved = train::parse_recipe(train::to_json(base), "saved", "/unrelated");
  EXPECT_TRUE(train::schedule_differences(saved, base).empty());
  EXPECT_EQ(train::to_json(saved), train::to_json(base));

  const std::vector<std::pair<std::string, std::string>> changes = {
      {"seed=4", "seed: 3 -> 4"},
      {"optimizer.steps=50", "optimizer.steps: 4 -> 50"},
      {"optimizer.warmup_steps=1", "optimizer.warmup_steps: 2 -> 1"},
      {"optimizer.batch_size=8", "optimizer.batch_size: 4 -> 8"},
      {"qat.steps=2", "qat.steps: 0 -> 2"},
      {"losses.mtp_weight=0.5", "losses.mtp_weight: 0.3 -> 0.5"},
      {"data.max_tokens=64", "data.max_tokens: 96 -> 64"},
      {"model.config=/other.json",
       "model.config: \"" + kSource + "/configs/tiny-seed.json\" -> \"/other.json\""},
      {"data.train=[{\"domain\": \"terminal\", \"n\": 25, \"seed\": 1}]", "data.train: "},
  };
  for (const auto& [change, expected] : changes) {
    auto r = base;
    train::apply_override(r, change);
    const auto d = train::schedule_differences(base, r);
    ASSERT_EQ(d.size(), 1u) << change;
    EXPECT_EQ(d[0].rfind(expected, 0), 0u) << change << ": " << d[0];
  }
}

TEST(RunDir, EveryCheckpointIsAModelDirectoryTheEnginesToolsLoad) {
  moxi::testing::temp_dir tmp("moxi-run-ckpt");
  const auto recipe = write_recipe(tmp.path(), 2);
  const std::string out = tmp / "run";
  ASSERT_EQ(run(train_cmd(recipe, out), tmp / "train.log"), 0) << read_file(tmp / "train.log");
  const std::string ckpt = out + "/checkpoints/step-00000002";
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                        "generation_config.json"})
    EXPECT_TRUE(fs::exists(ckpt + "/" + f)) << f;
  EXPECT_TRUE(contains(read_file(ckpt + "/tokenizer_config.json"), "<|assistant|>")) << "no chat template";

  ASSERT_EQ(run({kBinary + "/moxi", "inspect", ckpt}, tmp / "inspect.log"), 0)
      << read_file(tmp / "inspect.log");
  ASSERT_EQ(run({kBinary + "/moxi", "generate", "--model", ckpt, "--prompt", "ls", "--max-tokens", "2"},
                tmp / "generate.log"),
            0)
      << read_file(tmp / "generate.log");
  // The export (MXFP4 experts) is loadable too, and the run's config keeps its quantization: training
  // resumed from a checkpoint still quantizes in QAT and exports MXFP4 (SftRun.KilledAndResumed...).
  ASSERT_EQ(run({kBinary + "/moxi", "inspect", out + "/model"}, tmp / "inspect-export.log"), 0)
      << read_file(tmp / "inspect-export.log");
  EXPECT_TRUE(contains(read_file(out + "/model/config.json"), "quantization_config"));
}

TEST(RunDir, InterruptedRunCheckpointsAndPrintsTheCommandThatResumesIt) {
  moxi::testing::temp_dir tmp("moxi-run-sigint");
  const auto recipe = write_recipe(tmp.path(), 24);
  const std::string out = tmp / "run";
  std::vector<std::string> cmd = {kBinary + "/moxi", "train", "sft", "--recipe", recipe, "--out", out};
  const pid_t pid = spawn_logged(cmd, tmp / "a.log");
  ASSERT_TRUE(wait_for([&] { return logged_step(out) >= 3; })) << read_file(tmp / "a.log");
  ::kill(pid, SIGINT);
  ASSERT_EQ(wait_exit(pid), 128 + SIGINT) << read_file(tmp / "a.log");
  const auto msg = read_file(tmp / "a.log");
  const int64_t stopped = latest_step(out);
  ASSERT_GE(stopped, 3) << msg;
  ASSERT_LT(stopped, 24) << "the run finished before it could be interrupted";
  EXPECT_EQ(logged_step(out), stopped) << "the checkpoint is not the step the run stopped after";
  EXPECT_TRUE(contains(msg, "interrupted after step " + std::to_string(stopped))) << msg;
  EXPECT_TRUE(contains(msg, "moxi train sft --recipe " + recipe + " --out " + out + "\n")) << msg;

  ASSERT_EQ(run(cmd, tmp / "b.log"), 0) << read_file(tmp / "b.log");
  EXPECT_TRUE(contains(read_file(tmp / "b.log"), "resuming from")) << read_file(tmp / "b.log");
  EXPECT_EQ(latest_step(out), 24);
}

// The printed resume command is pasted into a POSIX shell: words that need it are single-quoted.
TEST(RunDir, ResumeCommandWordsAreQuotedForTheShell) {
  EXPECT_EQ(train::shell_quote("--out=/runs/a-1.b_c"), "--out=/runs/a-1.b_c");
  EXPECT_EQ(train::shell_quote("my run"), "'my run'");
  EXPECT_EQ(train::shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(train::shell_quote("$HOME;rm"), "'$HOME;rm'");
  EXPECT_EQ(train::shell_quote(""), "''");
}

}  // namespace
