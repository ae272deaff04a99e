// Data-parallel `moxi train sft` and `moxi train rl` (docs/train.md, "Data-parallel training"): two
// moxi-train processes, each training half of every batch and meeting through a c10d FileStore in the test's
// own directory, against an independent single-process run of the whole batch; a data-parallel run killed
// with SIGKILL and resumed against an uninterrupted one; and the layouts that are refused, each with its
// message.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/read-file.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/train/model.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

const std::string kSource = MOXI_SOURCE_DIR, kBinary = MOXI_BINARY_DIR;

using moxi::testing::read_file;
using moxi::testing::spawn_logged;
using moxi::testing::wait_exit;

// tiny-seed (KDA + Gated DSA with its indexer, MoE with the aux-free router bias, MTP, a vision tower) on 24
// terminal chats, a global batch of 4 conversations, one thread per process, no held-out data.
//
// AdamW's eps is 1e-3 instead of 1e-8 here. AdamW divides each gradient element by its own running
// magnitude; an element whose gradient is ~0 by cancellation then turns its rounding noise into a full-size
// step (with eps 1e-8, one step already leaves 1.3e-5 relative differences between one and two processes),
// which would measure the optimizer's sensitivity rather than the gradients. With eps 1e-3 such elements
// take steps proportional to their gradient. Clipping stays on (the logged grad_norm is the pre-clip norm
// and is compared too, so a gradient scaled by the world size cannot hide behind the clipping).
// dense_dsa: every step attends densely (DSA warm-up), so that the indexer's top-k picks nothing.
std::string write_recipe(const std::string& dir, int64_t steps, int64_t qat_steps, bool dense_dsa = false) {
  const nlohmann::json r = {
      {"seed", 3},
      {"threads", 1},
      {"model", {{"config", kSource + "/configs/tiny-seed.json"}}},
      {"chat_template", kSource + "/configs/chat-templates/moxi-tiny.jinja"},
      {"data", {{"train", {{{"domain", "terminal"}, {"n", 24}, {"seed", 1}}}}, {"max_tokens", 96}}},
      {"optimizer",
       {{"batch_size", 4},
        {"steps", steps},
        {"lr", 1e-3},
        {"min_lr", 1e-4},
        {"warmup_steps", 2},
        {"eps", 1e-3}}},
      {"eval", {{"every", 0}}},
      {"qat", {{"steps", qat_steps}, {"lr", 1e-3}}},
      {"checkpoint_every", 2},
      {"log_every", 1},
      {"losses", {{"dsa_dense_steps", dense_dsa ? steps : 0}}}};
  const std::string path = dir + "/recipe.json";
  std::ofstream(path) << r.dump(2);
  return path;
}

std::vector<std::string> train_cmd(const std::string& recipe, const std::string& out,
                                   std::vector<std::string> extra = {}, const std::string& command = "sft") {
  std::vector<std::string> c = {kBinary + "/moxi-train", command, "--recipe", recipe, "--out", out};
  c.insert(c.end(), extra.begin(), extra.end());
  return c;
}

// Rank r of a world of `world` meeting at `store`.
std::vector<std::string> rank_args(int r, int world, const std::string& store) {
  return {"--dist-rank", std::to_string(r), "--dist-world", std::to_string(world), "--dist-store", store};
}

// Starts both ranks of a two-process run; their logs are LOG.0 and LOG.1.
std::pair<pid_t, pid_t> launch_two(const std::string& recipe, const std::string& out,
                                   const std::string& store, const std::string& log,
                                   const std::string& command = "sft") {
  const pid_t r0 = spawn_logged(train_cmd(recipe, out, rank_args(0, 2, store), command), log + ".0");
  const pid_t r1 = spawn_logged(train_cmd(recipe, out, rank_args(1, 2, store), command), log + ".1");
  return {r0, r1};
}

int64_t latest_step(const std::string& out) {
  const std::string p = out + "/checkpoints/latest";
  if (!fs::exists(p)) return -1;
  const auto s = read_file(p);
  return s.rfind("step-", 0) == 0 ? std::stoll(s.substr(5)) : -1;
}

std::string step_dir(const std::string& out, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return out + "/checkpoints/" + name;
}

// The run's log lines that carry `key`: the steps ("loss" for SFT, "rollout_tokens" for RL).
std::vector<nlohmann::json> log_lines_with(const std::string& out, const char* key) {
  std::vector<nlohmann::json> lines;
  std::ifstream f(out + "/log.jsonl");
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains(key)) lines.push_back(std::move(j));
  }
  return lines;
}

std::vector<nlohmann::json> training_lines(const std::string& out) {
  return log_lines_with(out, "loss");
}

double rel(double a, double b) {
  return std::abs(a - b) / std::max(std::abs(a), 1e-30);
}

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST(DistSft, TwoRanksOfHalfTheBatchEqualOneProcessOfTheWholeBatch) {
  moxi::testing::temp_dir tmp("moxi-dist-equal");
  // Dense attention: the index keys are rounded to FP8 as the engine caches them, and a rounding that a 1e-7
  // difference between the two layouts flips could change a top-k pick; the indexer KL and parameters,
  // checked at 1e-4 below, still see it.
  const auto recipe = write_recipe(tmp.path(), 4, 0, true);
  const std::string one = tmp / "one", two = tmp / "two";
  ASSERT_EQ(wait_exit(spawn_logged(train_cmd(recipe, one), tmp / "one.log")), 0)
      << read_file(tmp / "one.log");
  const auto [r0, r1] = launch_two(recipe, two, "file:" + (tmp / "store"), tmp / "two.log");
  ASSERT_EQ(wait_exit(r0), 0) << read_file(tmp / "two.log.0");
  ASSERT_EQ(wait_exit(r1), 0) << read_file(tmp / "two.log.1");
  EXPECT_TRUE(contains(read_file(tmp / "two.log.0"), "batch 4 (2 on each of 2 ranks)"))
      << read_file(tmp / "two.log.0");
  // Rank 1 reports nothing: rank 0 speaks for the run.
  EXPECT_FALSE(contains(read_file(tmp / "two.log.1"), "sft: step")) << read_file(tmp / "two.log.1");
  EXPECT_FALSE(fs::exists(tmp / "store")) << "c10d removes a FileStore's file when every rank has closed it";

  // Every step's loss terms and pre-clip gradient norm: the ranks' sums are the whole batch's.
  const auto a = training_lines(one), b = training_lines(two);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* k : {"loss", "ce", "mtp", "balance", "grad_norm"})
      EXPECT_LT(rel(a[i][k].get<double>(), b[i][k].get<double>()), 1e-6)
          << "step " << a[i]["step"] << " " << k << ": " << a[i][k] << " vs " << b[i][k];
    // The indexer KL (~1e-4) is a float32 difference of terms of size ~1 per query: at step 1, from the
    // same parameters, one and two processes already differ by ~4e-6 relative there.
    EXPECT_LT(rel(a[i]["indexer_kl"].get<double>(), b[i]["indexer_kl"].get<double>()), 1e-4)
        << "step " << a[i]["step"] << ": " << a[i]["indexer_kl"] << " vs " << b[i]["indexer_kl"];
    EXPECT_EQ(a[i]["tokens_per_s"].is_number(), b[i]["tokens_per_s"].is_number());
  }

  // Every parameter after 4 AdamW steps: |a - b| / |a| (L2 over the tensor) within 5e-6: float32 sums in
  // another order, which AdamW's division by sqrt(v) enlarges for small gradients (measured up to 1.2e-6 in an
  // MoE latent projection on the current data), far below what a gradient summed instead of averaged over
  // the ranks, or a batch split wrongly, would change. The indexer's own
  // parameters, which only that KL trains, carry its rounding and the FP8 rounding of the index keys, where a
  // 1e-7 difference can move a key element by a whole E4M3 step (1/16 of it): 2e-3 (measured 5.1e-4).
  const auto ma = train::train_model::load(step_dir(one, 4));
  const auto mb = train::train_model::load(step_dir(two, 4));
  double worst = 0, worst_indexer = 0;
  std::string worst_name;
  for (const auto& [name, p] : ma.params()) {
    const auto& q = mb.params().at(name);
    const double norm = p.to(torch::kFloat64).norm().item<double>();
    const double diff = (p.to(torch::kFloat64) - q.to(torch::kFloat64)).norm().item<double>();
    const double r = norm > 0 ? diff / norm : diff;
    if (contains(name, ".indexer.")) {
      worst_indexer = std::max(worst_indexer, r);
      EXPECT_LT(r, 2e-3) << name;
    } else {
      if (r > worst) {
        worst = r;
        worst_name = name;
      }
      EXPECT_LT(r, 5e-6) << name;
    }
  }
  std::printf("worst relative difference: %.2e (%s); indexer %.2e\n", worst, worst_name.c_str(),
              worst_indexer);
  // The training moved the weights far more than that: the comparison is not between two untouched models.
  const auto m0 = train::train_model::init(ma.config(), 3);
  const std::string w = "model.layers.0.mlp.down_proj.weight";
  EXPECT_GT((ma.params().at(w) - m0.params().at(w)).norm().item<double>(),
            1e3 * (ma.params().at(w) - mb.params().at(w)).norm().item<double>());
}

TEST(DistSft, KilledAndResumedDataParallelRunEqualsTheUninterruptedOne) {
  moxi::testing::temp_dir tmp("moxi-dist-resume");
  const auto recipe = write_recipe(tmp.path(), 10, 2);
  const std::string a = tmp / "a", b = tmp / "b";
  {
    const auto [r0, r1] = launch_two(recipe, a, "file:" + (tmp / "store-a"), tmp / "a.log");
    ASSERT_EQ(wait_exit(r0), 0) << read_file(tmp / "a.log.0");
    ASSERT_EQ(wait_exit(r1), 0) << read_file(tmp / "a.log.1");
  }
  // Kill rank 0 once it has checkpointed step 4; rank 1 then loses it and stops with a message.
  const std::string store_b = "file:" + (tmp / "store-b");
  {
    const auto [r0, r1] = launch_two(recipe, b, store_b, tmp / "b1.log");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (latest_step(b) < 4 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ::kill(r0, SIGKILL);
    ASSERT_EQ(wait_exit(r0), 128 + SIGKILL) << read_file(tmp / "b1.log.0");
    ASSERT_EQ(wait_exit(r1), 1) << read_file(tmp / "b1.log.1");
    EXPECT_TRUE(contains(read_file(tmp / "b1.log.1"), "rank 1 of 2: ")) << read_file(tmp / "b1.log.1");
    EXPECT_TRUE(contains(read_file(tmp / "b1.log.1"), "lost the other ranks")) << read_file(tmp / "b1.log.1");
  }
  const int64_t killed_at = latest_step(b);
  ASSERT_GE(killed_at, 4);
  ASSERT_LT(killed_at, 12) << "the run finished before it could be killed";
  // The killed launch left its FileStore file behind: reusing it is refused, naming the cause.
  {
    const auto [r0, r1] = launch_two(recipe, b, store_b, tmp / "stale.log");
    EXPECT_EQ(wait_exit(r0), 1) << read_file(tmp / "stale.log.0");
    EXPECT_EQ(wait_exit(r1), 1) << read_file(tmp / "stale.log.1");
    const auto msg = read_file(tmp / "stale.log.0") + read_file(tmp / "stale.log.1");
    EXPECT_TRUE(contains(msg, "left over from an earlier launch")) << msg;
    EXPECT_EQ(latest_step(b), killed_at);
  }
  // A fresh store: both ranks read rank 0's checkpoint and finish the run.
  {
    const auto [r0, r1] = launch_two(recipe, b, "file:" + (tmp / "store-b2"), tmp / "b2.log");
    ASSERT_EQ(wait_exit(r0), 0) << read_file(tmp / "b2.log.0");
    ASSERT_EQ(wait_exit(r1), 0) << read_file(tmp / "b2.log.1");
    EXPECT_TRUE(contains(read_file(tmp / "b2.log.0"), "resuming from")) << read_file(tmp / "b2.log.0");
  }
  ASSERT_EQ(latest_step(a), 12);
  ASSERT_EQ(latest_step(b), 12);
  const auto ma = train::train_model::load(step_dir(a, 12));
  const auto mb = train::train_model::load(step_dir(b, 12));
  for (const auto& [name, p] : ma.params())
    EXPECT_TRUE(torch::equal(p, mb.params().at(name)))
        << name << " differs after resume (killed at step " << killed_at << ")";
  EXPECT_EQ(read_file(a + "/model/model.safetensors"), read_file(b + "/model/model.safetensors"));
  EXPECT_TRUE(fs::exists(a + "/model-sft/model.safetensors"));
}

// The step after which a log says the run was interrupted (-1: none).
int64_t interrupted_after(const std::string& log) {
  const std::string key = "interrupted after step ";
  const auto at = log.find(key);
  return at == std::string::npos ? -1 : std::stoll(log.substr(at + key.size()));
}

TEST(DistSft, ASignalToOneRankStopsEveryRankAfterTheSameStep) {
  moxi::testing::temp_dir tmp("moxi-dist-signal");
  const auto recipe = write_recipe(tmp.path(), 100000, 0);  // runs until stopped
  const std::string out = tmp / "run";
  const auto [r0, r1] = launch_two(recipe, out, "file:" + (tmp / "store"), tmp / "run.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (training_lines(out).size() < 3 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(r1, SIGTERM);  // rank 1 only: rank 0 learns of it in the step's exchange
  EXPECT_EQ(wait_exit(r0), 128 + SIGTERM) << read_file(tmp / "run.log.0");
  EXPECT_EQ(wait_exit(r1), 128 + SIGTERM) << read_file(tmp / "run.log.1");
  const int64_t s0 = interrupted_after(read_file(tmp / "run.log.0"));
  const int64_t s1 = interrupted_after(read_file(tmp / "run.log.1"));
  EXPECT_GE(s0, 3) << read_file(tmp / "run.log.0");
  EXPECT_EQ(s0, s1) << read_file(tmp / "run.log.1");
  EXPECT_EQ(latest_step(out), s0) << "rank 0 checkpoints the step every rank stopped after";
  EXPECT_TRUE(contains(read_file(tmp / "run.log.1"), "--dist-rank 1"))
      << "the resume command is each rank's own";
  EXPECT_FALSE(fs::exists(tmp / "store")) << "a clean stop leaves no store file: the same command resumes";
}

// A TCP port nobody listens on (bound, then released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

TEST(DistSft, BadLayoutsAreRefusedWithAClearMessage) {
  moxi::testing::temp_dir tmp("moxi-dist-layout");
  const auto recipe = write_recipe(tmp.path(), 2, 0);
  const std::string out = tmp / "run", store = "file:" + (tmp / "store");
  struct refusal {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<refusal> refusals = {
      {{"--batch-size", "5", "--dist-rank", "0", "--dist-world", "2", "--dist-store", store},
       "optimizer.batch_size 5 is not divisible by the 2 ranks"},
      {{"--dist-rank", "2", "--dist-world", "2", "--dist-store", store},
       "rank 2 (--dist-rank) is outside a world of 2"},
      {{"--dist-rank", "0", "--dist-world", "2"}, "needs a store where the ranks meet"},
      {{"--dist-world", "2", "--dist-store", store}, "needs this process's rank"},
      {{"--dist-rank", "0", "--dist-world", "2", "--dist-store", "nfs:/x"},
       "expected file:PATH or tcp:HOST:PORT"},
      {{"--dist-rank", "0", "--dist-world", "2", "--dist-store", "file:" + (tmp / "no/such/dir/store")},
       "does not exist"},
      // Rank 1 alone: nobody serves the TCP store.
      {{"--dist-rank", "1", "--dist-world", "2", "--dist-timeout", "1", "--dist-store",
        "tcp:127.0.0.1:" + std::to_string(free_port())},
       "cannot reach the store"},
      // Rank 0 alone on a FileStore: the other rank never joins.
      {{"--dist-rank", "0", "--dist-world", "2", "--dist-timeout", "1", "--dist-store", store},
       "only 1 of 2 ranks joined the store"},
  };
  int i = 0;
  for (const auto& r : refusals) {
    const std::string log = tmp / ("refused-" + std::to_string(i++) + ".log");
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(wait_exit(spawn_logged(train_cmd(recipe, out, r.args), log)), 1) << read_file(log);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(contains(read_file(log), r.message)) << "wanted '" << r.message << "':\n" << read_file(log);
    EXPECT_FALSE(contains(read_file(log), "sft: step")) << read_file(log);
    EXPECT_LT(secs, 60) << r.message;  // (a guard against hanging, not a timing threshold)
    fs::remove(tmp / "store");
  }
  EXPECT_FALSE(fs::exists(out + "/checkpoints/latest"));

  // mpirun's variables name the layout too; the loop trains in one process and says so.
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  ::setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  const std::string loop_recipe = kSource + "/recipes/moxi-small-loop.json";
  EXPECT_EQ(wait_exit(spawn_logged(
                {kBinary + "/moxi-train", "loop", "--recipe", loop_recipe, "--out", tmp / "loop"}, tmp / "loop.log")),
            1)
      << read_file(tmp / "loop.log");
  EXPECT_TRUE(contains(read_file(tmp / "loop.log"), "moxi train loop trains in one process"))
      << read_file(tmp / "loop.log");
  EXPECT_EQ(wait_exit(spawn_logged(train_cmd(recipe, out), tmp / "ompi.log")), 1)
      << read_file(tmp / "ompi.log");
  EXPECT_TRUE(contains(read_file(tmp / "ompi.log"), "needs a store where the ranks meet"))
      << read_file(tmp / "ompi.log");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_FALSE(fs::exists(tmp / "loop"));
}

// GRPO from the bundled moxi-tiny on math and terminal prompts: `prompts` x `samples` per step, 2
// mini-batches, the KL to the reference as a loss, AdamW eps 1e-3 (see write_recipe), one thread each. A
// rank rolls out its slice of the prompts; the samplers' seeds depend on the prompt only, so the samples
// are those of one process.
std::string write_rl_recipe(const std::string& dir, int64_t steps, int64_t prompts, int64_t samples,
                            bool qat = true) {
  nlohmann::json r = {
      {"seed", 5},
      {"threads", 1},
      {"model", {{"init", kSource + "/models/moxi-tiny"}}},
      {"data",
       {{"train",
         {{{"domain", "math"}, {"n", 32}, {"seed", 1}, {"weight", 1}},
          {{"domain", "terminal"}, {"n", 32}, {"seed", 2}, {"weight", 1}}}}}},
      {"rollout", {{"prompts", prompts}, {"samples", samples}, {"max_tokens", 24}, {"max_gen_batches", 2}}},
      {"algorithm", {{"name", "grpo"}, {"kl", {{"where", "loss"}, {"coef", 0.01}}}}},
      {"reward", {{"correct", 1}, {"completion", 0.2}, {"format", 0.2}}},
      {"optimizer", {{"steps", steps}, {"lr", 1e-4}, {"mini_batches", 2}, {"eps", 1e-3}}},
      {"checkpoint_every", 1}};
  r["qat"] = qat;
  const std::string path = dir + "/rl.json";
  std::ofstream(path) << r.dump(2);
  return path;
}

std::vector<nlohmann::json> rl_step_lines(const std::string& out) {
  return log_lines_with(out, "rollout_tokens");
}

// Runs the recipe in one process and on two ranks; returns both run directories.
std::pair<std::string, std::string> one_and_two(const moxi::testing::temp_dir& tmp, const std::string& recipe) {
  const std::string one = tmp / "one", two = tmp / "two";
  EXPECT_EQ(wait_exit(spawn_logged(train_cmd(recipe, one, {}, "rl"), tmp / "one.log")), 0)
      << read_file(tmp / "one.log");
  const auto [r0, r1] = launch_two(recipe, two, "file:" + (tmp / "store"), tmp / "two.log", "rl");
  EXPECT_EQ(wait_exit(r0), 0) << read_file(tmp / "two.log.0");
  EXPECT_EQ(wait_exit(r1), 0) << read_file(tmp / "two.log.1");
  EXPECT_FALSE(fs::exists(two + "/rollout-model.rank0"));
  EXPECT_FALSE(fs::exists(two + "/rollout-model.rank1"));
  return {one, two};
}

// The worst |a - b| / |a| over the parameters of the two runs' checkpoints at `step`, and the summed norms of
// how far run a moved from the start and how far the runs are apart.
struct param_diff {
  double worst = 0, moved = 0, apart = 0;
};
param_diff compare_params(const std::string& a, const std::string& b, int64_t step) {
  const auto ma = train::train_model::load(step_dir(a, step));
  const auto mb = train::train_model::load(step_dir(b, step));
  const auto m0 = train::train_model::load(kSource + "/models/moxi-tiny");
  param_diff d;
  for (const auto& [name, p] : ma.params()) {
    const auto pa = p.to(torch::kFloat64), pb = mb.params().at(name).to(torch::kFloat64);
    const double norm = pa.norm().item<double>(), diff = (pa - pb).norm().item<double>();
    d.worst = std::max(d.worst, norm > 0 ? diff / norm : diff);
    d.moved += (pa - m0.params().at(name).to(torch::kFloat64)).norm().item<double>();
    d.apart += diff;
  }
  std::printf("worst relative difference %.2e; moved %.3e, apart %.3e\n", d.worst, d.moved, d.apart);
  return d;
}

// One prompt per step: rank 0 rolls it out and trains on all of it; rank 1 has no rows and adds zeros to
// every sum. The run must be bit for bit the single process's: the exchanges, the loss shares, the summed
// gradients, the clipping and the checkpoints are exactly right.
TEST(DistRl, ARankWithoutRowsChangesNothingBitForBit) {
  moxi::testing::temp_dir tmp("moxi-dist-rl-one");
  const auto [one, two] = one_and_two(tmp, write_rl_recipe(tmp.path(), 8, 1, 6));
  const auto a = rl_step_lines(one), b = rl_step_lines(two);
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  int64_t updates = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    updates += a[i].contains("samples");
    for (const char* k : {"groups", "rollout_tokens", "rollout_reward", "samples", "reward", "kl", "entropy",
                          "grad_norm", "clip_frac", "engine_logprob_diff_mean"})
      EXPECT_EQ(a[i].value(k, nlohmann::json()), b[i].value(k, nlohmann::json())) << "step " << i + 1 << " " << k;
  }
  EXPECT_GE(updates, 2);
  EXPECT_EQ(compare_params(one, two, 8).apart, 0.0);
}

// Four prompts, two per rank: the same rollouts and keep decisions at every step, the same update up to
// float rounding. Each rank's forward runs on its own rows (other shapes, so other GEMM blockings and
// summation orders); the gradients are summed across ranks and the loss shares make the sum the single
// process's. With QAT off the runs stay within rounding, up to the graph's few discontinuities (the
// routers' and the DSA indexer's top-k, where a score moved by rounding can pick another expert or key):
// measured parameters 3.2e-8 apart relative to their norm and grad norms within 4e-6 on one draw of the
// prompts, 1.3e-6 and 1.5e-4 on another (the generator's current one).
void check_two_ranks_of_half_the_prompts(bool qat, double param_bound, double grad_norm_bound) {
  moxi::testing::temp_dir tmp("moxi-dist-rl");
  const auto [one, two] = one_and_two(tmp, write_rl_recipe(tmp.path(), 3, 4, 4, qat));
  const auto a = rl_step_lines(one), b = rl_step_lines(two);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  int64_t updates = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* k : {"groups", "groups_filtered", "dropped", "rollout_tokens", "samples"})
      EXPECT_EQ(a[i].value(k, nlohmann::json()), b[i].value(k, nlohmann::json())) << "step " << i + 1 << " " << k;
    for (const char* k : {"rollout_pass_rate", "rollout_reward"})
      EXPECT_LT(rel(a[i][k].get<double>(), b[i][k].get<double>()), 1e-9) << "step " << i + 1 << " " << k;
    if (!a[i].contains("samples")) continue;
    ++updates;
    for (const char* k : {"reward", "pass_rate"})  // (float sums of the same rewards)
      EXPECT_LT(rel(a[i][k].get<double>(), b[i][k].get<double>()), 1e-6) << "step " << i + 1 << " " << k;
    // A wrong share of the loss (a gradient scaled by the world size, tokens counted per rank) would move
    // the pre-clip norm by far more.
    EXPECT_LT(rel(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>()), grad_norm_bound)
        << "step " << i + 1 << ": " << a[i]["grad_norm"] << " vs " << b[i]["grad_norm"];
    EXPECT_EQ(a[i]["domains"].size(), b[i]["domains"].size());
  }
  EXPECT_GT(updates, 0) << "no step updated the policy: nothing was compared";
  const auto d = compare_params(one, two, 3);
  EXPECT_LT(d.worst, param_bound);
  EXPECT_GT(d.moved, 100 * d.apart) << "the runs did not train, or trained apart";
}

TEST(DistRl, TwoRanksOfHalfThePromptsEqualOneProcessOfAllOfThem) {
  check_two_ranks_of_half_the_prompts(false, 5e-6, 1e-3);
}

// With QAT on (as RL runs by default) the expert inputs are rounded to MXFP8 in the forward, and an input
// that moved by 1e-7 can round to the neighbouring FP8 value, 1/16 to 1/8 of that element away. Such flips
// are not the data-parallel exchange's doing; measured: parameters 4.8e-6 apart, grad norms 2.3e-3.
TEST(DistRl, TwoRanksOfHalfThePromptsUnderQatStayWithinTheQuantizersRounding) {
  check_two_ranks_of_half_the_prompts(true, 2e-5, 1e-2);
}

}  // namespace
