// Whole RL runs of `moxi train rl` from the bundled moxi-tiny (a real SFT model with a chat template), on
// math and terminal prompts checked in the sandbox: the engine's and the trainer's log-probs agree on the QAT
// model, a short GRPO run logs every per-domain quantity and exports a model the engine serves, a PPO run
// killed with SIGKILL and resumed ends with exactly the parameters of an uninterrupted one, and bad recipes
// are refused naming the field.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/eval/evaluate.h"
#include "moxi/eval/task-generator.h"
#include "moxi/model/config.h"
#include "moxi/runtime/local-model.h"
#include "moxi/serve/offline.h"
#include "moxi/train/model.h"
#include "moxi/train/rl-core.h"
#include "moxi/train/run-dir.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

const std::string kSource = MOXI_SOURCE_DIR, kBinary = MOXI_BINARY_DIR;
using moxi::testing::read_file;
using moxi::testing::spawn_logged;
using moxi::testing::wait_exit;

nlohmann::json recipe_json(const std::string& algorithm, int64_t steps) {
  return {{"seed", 5},
          {"threads", 1},
          {"model", {{"init", kSource + "/models/moxi-tiny"}}},
          {"data",
           {{"train",
             {{{"domain", "math"}, {"n", 32}, {"seed", 1}, {"weight", 1}},
              {{"domain", "terminal"}, {"n", 32}, {"seed", 2}, {"weight", 1}}}},
            {"eval", {{{"domain", "math"}, {"split", "test"}, {"n", 4}, {"seed", 3}}}}}},
          {"rollout", {{"prompts", 2}, {"samples", 4}, {"max_tokens", 24}, {"max_gen_batches", 2}}},
          {"algorithm", {{"name", algorithm}, {"kl", {{"where", "loss"}, {"coef", 0.01}}}}},
          {"reward", {{"correct", 1}, {"completion", 0.2}, {"format", 0.2}}},
          {"optimizer", {{"steps", steps}, {"lr", 1e-4}, {"mini_batches", 2}}},
          {"checkpoint_every", 1}};
}

std::string write_recipe(const std::string& dir, const nlohmann::json& r) {
  const std::string path = dir + "/rl.json";
  std::ofstream(path) << r.dump(2);
  return path;
}

int64_t latest_step(const std::string& out) {
  const std::string p = out + "/checkpoints/latest";
  if (!fs::exists(p)) return -1;
  const auto s = read_file(p);
  return s.rfind("step-", 0) == 0 ? std::stoll(s.substr(5)) : -1;
}

std::vector<nlohmann::json> log_lines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::ifstream f(out + "/log.jsonl");
  for (std::string line; std::getline(f, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

// The engine samples (BF16 weights, MXFP4 experts, MXFP8 expert inputs) and reports each token's log-prob;
// the trainer's QAT graph over the same weights recomputes them. They differ only by kernel arithmetic.
TEST(RlLogprobs, EngineAndTrainerAgreeOnTheQatModel) {
  moxi::testing::temp_dir tmp("moxi-rl-logprobs");
  const auto lm = runtime::local_model::load(kSource + "/models/moxi-tiny");
  // One set of weights for both: the bundled model as the engine stores it, loaded by the trainer too.
  const auto trainer = train::train_model::load(kSource + "/models/moxi-tiny", {.qat = true});
  ASSERT_TRUE(lm.model.config().quant.has_value());

  std::vector<serve::offline_request> reqs;
  for (const auto& t : eval::generate_tasks(eval::domain::math, eval::split::train, 3, 9)) {
    serve::offline_request q;
    const auto ids = lm.tok.encode(eval::render_task_prompt(t, lm.require_chat()), true);
    q.prompt.assign(ids.begin(), ids.end());
    q.n = 3;
    q.max_tokens = 20;
    q.sampling.temperature = 1;
    q.sampling.seed = 77;
    reqs.push_back(q);
  }
  const auto outs = serve::generate_offline(lm.model, reqs);
  double worst = 0, sum = 0;
  int64_t n = 0;
  for (size_t i = 0; i < reqs.size(); ++i)
    for (const auto& s : outs[i]) {
      std::vector<int64_t> all(reqs[i].prompt.begin(), reqs[i].prompt.end());
      all.insert(all.end(), s.tokens.begin(), s.tokens.end());
      const auto tokens = torch::tensor(all, torch::kInt64).unsqueeze(0);
      torch::NoGradGuard ng;
      const auto logits = trainer.forward(tokens).logits.slice(1, 0, int64_t(all.size()) - 1);
      const auto lp = train::rl::token_logprobs(logits, tokens.slice(1, 1)).squeeze(0);
      const int64_t P = int64_t(reqs[i].prompt.size());
      for (size_t j = 0; j < s.tokens.size(); ++j) {
        const double d = std::abs(lp[P - 1 + int64_t(j)].item<double>() - double(s.logprobs[j]));
        worst = std::max(worst, d);
        sum += d;
        ++n;
      }
    }
  ASSERT_GT(n, 20);
  // Stated tolerance (docs/rl.md): mean |difference| under 1e-3 nats, none above 2e-2.
  EXPECT_LT(sum / double(n), 1e-3) << "worst " << worst;
  EXPECT_LT(worst, 2e-2);
}

TEST(RlRun, GrpoRunLogsEveryDomainQuantityAndExportsAServableModel) {
  moxi::testing::temp_dir tmp("moxi-rl-grpo");
  const auto recipe = write_recipe(tmp.path(), recipe_json("grpo", 3));
  const std::string out = tmp / "run";
  const auto r =
      moxi::testing::run_shell(kBinary + "/moxi train rl --recipe " + recipe + " --out " + out + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("rl: step 3/3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eta"), std::string::npos);
  int64_t steps = 0, updates = 0;
  for (const auto& l : log_lines(out)) {
    if (!l.contains("rollout_tokens")) continue;
    ++steps;
    EXPECT_GT(l.at("rollout_tokens").get<int64_t>(), 0);
    if (!l.contains("domains")) continue;  // a step without any group with a signal
    ++updates;
    for (const char* k : {"reward", "pass_rate", "kl", "entropy", "clip_frac", "grad_norm",
                          "engine_logprob_diff_mean", "train_tokens_per_s", "rollout_tokens_per_s"})
      EXPECT_TRUE(l.contains(k)) << k << " in " << l.dump();
    for (const auto& [name, d] : l.at("domains").items()) {
      EXPECT_TRUE(name == "math" || name == "terminal") << name;
      for (const char* k : {"samples", "reward", "pass_rate", "completion", "format", "kl", "entropy",
                            "clip_frac", "response_length"})
        EXPECT_TRUE(d.contains(k)) << k;
      EXPECT_GE(d.at("entropy").get<double>(), 0);
    }
    // Every kept group carries a signal (dynamic sampling): at most `prompts` of them.
    EXPECT_LE(l.at("groups").get<int64_t>(), 2);
  }
  EXPECT_EQ(steps, 3);
  EXPECT_GE(updates, 1);
  // The export is an engine model: MXFP4 experts, tokenizer and chat template kept.
  const auto lm = runtime::local_model::load(out + "/model");
  EXPECT_TRUE(lm.chat.has_value());
  ASSERT_TRUE(lm.model.config().quant.has_value());
  EXPECT_TRUE(fs::exists(out + "/eval-sft.json"));
  EXPECT_TRUE(fs::exists(out + "/eval-final.json"));
  EXPECT_FALSE(fs::exists(out + "/rollout-model"));
}

TEST(RlRun, KilledAndResumedPpoRunEndsWithExactlyTheUninterruptedParameters) {
  moxi::testing::temp_dir tmp("moxi-rl-resume");
  auto j = recipe_json("ppo", 5);
  j["data"]["eval"] = nlohmann::json::array();
  const auto recipe = write_recipe(tmp.path(), j);
  auto cmd = [&](const std::string& out) {
    return std::vector<std::string>{kBinary + "/moxi-train", "rl", "--recipe", recipe, "--out", out};
  };
  const std::string a = tmp / "a", b = tmp / "b";
  ASSERT_EQ(wait_exit(spawn_logged(cmd(a), tmp / "a.log")), 0) << read_file(tmp / "a.log");
  const pid_t pid = spawn_logged(cmd(b), tmp / "b1.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (latest_step(b) < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ::kill(pid, SIGKILL);
  ASSERT_EQ(wait_exit(pid), 128 + SIGKILL) << read_file(tmp / "b1.log");
  const int64_t killed_at = latest_step(b);
  ASSERT_GE(killed_at, 2);
  ASSERT_LT(killed_at, 5) << "the run finished before it could be killed";
  ASSERT_EQ(wait_exit(spawn_logged(cmd(b), tmp / "b2.log")), 0) << read_file(tmp / "b2.log");
  EXPECT_NE(read_file(tmp / "b2.log").find("resuming from"), std::string::npos);
  const std::string last = "/checkpoints/step-00000005";
  const auto ma = train::train_model::load(a + last), mb = train::train_model::load(b + last);
  for (const auto& [name, p] : ma.params())
    EXPECT_TRUE(torch::equal(p, mb.params().at(name)))
        << name << " differs (killed at step " << killed_at << ")";
  EXPECT_EQ(read_file(a + last + "/value-w.pt"), read_file(b + last + "/value-w.pt"));
  EXPECT_EQ(read_file(a + "/model/model.safetensors"), read_file(b + "/model/model.safetensors"));
}

// A mini-batch run as forwards of a few rows each (optimizer.micro_batch_tokens) updates the policy as one
// forward over the whole mini-batch does, up to float rounding: each length group's loss is scaled by its
// share of the mini-batch's aggregation denominator, so the summed gradients are the mini-batch's. Shapes
// differ (other GEMM blockings and summation orders), so the bounds are DistRl's for the same reason; QAT is
// off, since an MXFP8 input moved by rounding can flip to its neighbouring value (DistRl measures that case).
void check_micro_batches(const std::string& algorithm, const std::string& agg) {
  SCOPED_TRACE(algorithm + ", " + agg);
  moxi::testing::temp_dir tmp("moxi-rl-micro");
  auto j = recipe_json(algorithm, 3);
  j["qat"] = false;
  j["data"]["eval"] = nlohmann::json::array();
  j["rollout"]["prompts"] = 3;
  j["algorithm"]["loss_agg"] = agg;
  j["algorithm"]["entropy_coef"] = 0.01;
  std::map<int64_t, std::string> out;
  for (const int64_t budget :
       {0, 16}) {  // one forward per mini-batch; one row per forward (every row is longer)
    auto jb = j;
    jb["optimizer"]["micro_batch_tokens"] = budget;
    const std::string dir = tmp / ("budget-" + std::to_string(budget));
    fs::create_directories(dir);
    const auto recipe = write_recipe(dir, jb);
    const auto r = moxi::testing::run_shell(kBinary + "/moxi train rl --recipe " + recipe + " --out " + dir +
                                            "/run 2>&1");
    ASSERT_EQ(r.code, 0) << r.out;
    out[budget] = dir + "/run";
  }
  std::vector<nlohmann::json> a, b;
  for (const auto& l : log_lines(out[0]))
    if (l.contains("rollout_tokens")) a.push_back(l);
  for (const auto& l : log_lines(out[16]))
    if (l.contains("rollout_tokens")) b.push_back(l);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  int64_t updates = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* k : {"groups", "rollout_tokens", "samples"})
      EXPECT_EQ(a[i].value(k, nlohmann::json()), b[i].value(k, nlohmann::json()))
          << "step " << i + 1 << " " << k;
    if (!a[i].contains("samples")) continue;
    ++updates;
    // One forward per mini-batch (two of them) against one per row.
    const int64_t rows = a[i].at("samples").get<int64_t>();
    EXPECT_EQ(a[i].at("train_forwards").get<int64_t>(), std::min<int64_t>(rows, 2));
    EXPECT_EQ(b[i].at("train_forwards").get<int64_t>(), rows);
    const double ga = a[i].at("grad_norm").get<double>(), gb = b[i].at("grad_norm").get<double>();
    EXPECT_LT(std::abs(ga - gb) / ga, 1e-3)
        << "step " << i + 1 << ": a share counted wrong moves it far more";
  }
  ASSERT_GT(updates, 0) << "no step updated the policy: nothing was compared";
  const std::string last = "/checkpoints/step-00000003";
  const auto ma = train::train_model::load(out[0] + last), mb = train::train_model::load(out[16] + last),
             m0 = train::train_model::load(kSource + "/models/moxi-tiny");
  double worst = 0, moved = 0, apart = 0;
  for (const auto& [name, p] : ma.params()) {
    const auto pa = p.to(torch::kFloat64), pb = mb.params().at(name).to(torch::kFloat64);
    const double norm = pa.norm().item<double>(), diff = (pa - pb).norm().item<double>();
    worst = std::max(worst, norm > 0 ? diff / norm : diff);
    moved += (pa - m0.params().at(name).to(torch::kFloat64)).norm().item<double>();
    apart += diff;
  }
  // Measured: 2e-8 to 6e-6 apart relative to a tensor's norm, the most on experts few tokens reach, whose
  // AdamW steps turn a rounding-level gradient difference into a step-sized one.
  std::printf("worst relative difference %.2e; moved %.3e, apart %.3e\n", worst, moved, apart);
  EXPECT_LT(worst, 2e-5);
  EXPECT_GT(moved, 100 * apart) << "the runs did not train, or trained apart";
}

TEST(RlRun, LengthGroupedMicroBatchesGiveTheOneForwardUpdate) {
  check_micro_batches("grpo", "token-mean");
  check_micro_batches("ppo", "seq-mean-token-mean");
}

TEST(RlRun, BadRecipesAreRefusedNamingTheField) {
  moxi::testing::temp_dir tmp("moxi-rl-bad");
  auto run = [&](const nlohmann::json& j) {
    const auto recipe = write_recipe(tmp.path(), j);
    return moxi::testing::run_shell(kBinary + "/moxi train rl --recipe " + recipe + " --out " +
                                    (tmp / "run") + " 2>&1");
  };
  auto j = recipe_json("grpo", 1);
  j["rollout"]["samples"] = 1;
  auto r = run(j);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("rollout.samples must be >= 2 for GRPO"), std::string::npos) << r.out;
  j = recipe_json("grpo", 1);
  j["algorithm"]["clip"] = 0.2;
  r = run(j);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unknown field 'clip'"), std::string::npos) << r.out;
  j = recipe_json("dpo", 1);
  r = run(j);
  EXPECT_NE(r.out.find("unknown algorithm 'dpo'"), std::string::npos) << r.out;
  j = recipe_json("grpo", 1);
  j["algorithm"]["kl"]["estimator"] = "k9";
  r = run(j);
  EXPECT_NE(r.out.find("algorithm.kl.estimator"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(tmp / "run/checkpoints/latest"));
  // A start model that is not there yet: named, and no run directory written.
  j = recipe_json("grpo", 1);
  j["model"]["init"] = tmp / "no-sft-yet";
  r = run(j);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("model.init '" + tmp / "no-sft-yet" + "' is not a model directory"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(tmp / "run"));
}

}  // namespace
