// The model across processes (docs/distributed.md): `mpirun -np N moxi logits|generate --tp --ep --pp`
// against the same command in one process, the reference. Tiny configs of the seed's shape: MXFP4 experts
// with MXFP8 inputs, DSA top-k (8) smaller than the 80-token context, prompts longer than one KDA chunk
// (64), latent MoE, shared experts, MTP; plus DeepSeek-V3.2 (q-LoRA, RoPE, dense first layer) and a
// sliding-window hybrid (GQA). Each run is a few processes on this 2-core machine, one thread each.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/mpi-job.h"
#include "common/run-moxi.h"
#include "common/temp-dir.h"
#include "moxi/formats/checkpoint.h"

namespace moxi {
namespace {

using testing::any_process_with;
using testing::rank_pids;
using testing::run_shell;
using testing::wait_for;

const std::string kMoxi = std::string(MOXI_BINARY_DIR) + "/moxi";
const std::string kEnv = testing::kMpiEnv;
const std::string kMpirun = kEnv + "timeout 300 mpirun --oversubscribe --allow-run-as-root ";

std::string prompt_tokens(int n, int vocab) {
  std::string s;
  uint32_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    s += (i ? "," : "") + std::to_string(3 + (x >> 8) % uint32_t(vocab - 3));
  }
  return s;
}

std::vector<float> read_logits(const std::string& file) {
  const auto ck = formats::checkpoint::open(file);
  const auto v = ck.view("logits");
  std::vector<float> out(size_t(v.numel()));
  std::memcpy(out.data(), v.data, out.size() * sizeof(float));
  return out;
}

// max |a - b| / max |a|
double relative_error(const std::vector<float>& ref, const std::vector<float>& x) {
  EXPECT_EQ(ref.size(), x.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(ref.size(), x.size()); ++i) {
    num = std::max(num, double(std::fabs(ref[i] - x[i])));
    den = std::max(den, double(std::fabs(ref[i])));
  }
  return num / den;
}

class Distributed : public testing::temp_dir_test {
 protected:
  std::string init(const std::string& config, int seed = 5) {
    const std::string dir = path(config);
    const auto r = run_shell(kMoxi + " init --config " + std::string(MOXI_SOURCE_DIR) + "/configs/" + config +
                             ".json --out " + dir + " --seed " + std::to_string(seed) + " 2>&1");
    EXPECT_EQ(r.code, 0) << r.out;
    return dir;
  }
};

struct layout {
  int np;
  std::string flags;
};

// --pp-microbatch 24 / 32: the 80-token prompt crosses the stages in micro-batches (24 + 24 + 24 + 8; in
// chunked runs, 30 = 24 + 6), none aligned with the 64-token KDA chunk.
const std::vector<layout> kLayouts = {{2, "--tp 2"},
                                      {2, "--ep 2"},
                                      {4, "--ep 4"},
                                      {2, "--pp 2"},
                                      {2, "--pp 2 --pp-microbatch 24"},
                                      {2, "--tp 2 --ep 2"},
                                      {4, "--tp 2 --pp 2"},
                                      {4, "--tp 2 --ep 2 --pp 2 --pp-microbatch 32"}};

void expect_layouts_match(const std::string& model, const std::string& dir, const std::string& extra) {
  const std::string tokens = prompt_tokens(80, 500);
  const std::string ref_file = dir + "/ref.safetensors";
  auto r = run_shell(kEnv + kMoxi + " logits -m " + model + " --tokens " + tokens + " --out " + ref_file +
                     " --force " + extra + " 2>&1");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto ref = read_logits(ref_file);
  ASSERT_EQ(ref.size(), size_t(80 * 512));
  for (const auto& l : kLayouts) {
    const std::string out = dir + "/np" + std::to_string(l.np) + ".safetensors";
    r = run_shell(kMpirun + "-np " + std::to_string(l.np) + " " + kMoxi + " logits -m " + model + " --tokens " +
                  tokens + " --out " + out + " --force " + l.flags + " " + extra + " 2>&1");
    ASSERT_EQ(r.code, 0) << l.flags << "\n" << r.out;
    EXPECT_LT(relative_error(ref, read_logits(out)), 1e-5) << model << " " << l.flags << " " << extra;
  }
}

TEST_F(Distributed, SeedShapedLogitsOfEveryLayoutEqualOneProcess) {
  expect_layouts_match(init("tiny-seed"), dir_, "");
}

TEST_F(Distributed, ChunkedPrefillThroughTheCachesEqualsOneProcess) {
  // Three calls of 30, 30 and 20 tokens: KDA states, MLA latents and DSA keys carried across calls.
  expect_layouts_match(init("tiny-seed"), dir_, "--chunk 30");
}

TEST_F(Distributed, DeepSeekAndSlidingWindowLayoutsEqualOneProcess) {
  expect_layouts_match(init("tiny-deepseek-v3.2"), dir_, "");
  expect_layouts_match(init("tiny-hybrid-swa"), dir_, "");
}

TEST_F(Distributed, GreedyGenerationIsTokenForTokenTheSame) {
  // Seed 3: a random model whose greedy reply runs the whole 24 tokens (seed 5 stops after two).
  const std::string model = init("tiny-seed", 3);
  const std::string gen = " generate -m " + model + " --prompt 'the quick brown fox' --max-tokens 24 --raw";
  const auto ref = run_shell(kEnv + kMoxi + gen + " 2>/dev/null");
  ASSERT_EQ(ref.code, 0);
  ASSERT_GT(ref.out.size(), 24u);
  for (const auto& [np, flags] : std::vector<layout>{{2, "--tp 2 --ep 2"}, {2, "--pp 2 --pp-microbatch 16"}, {4, "--ep 4"}}) {
    const auto r = run_shell(kMpirun + "-np " + std::to_string(np) + " " + kMoxi + gen + " " + flags + " 2>/dev/null");
    ASSERT_EQ(r.code, 0) << flags;
    EXPECT_EQ(r.out, ref.out) << flags;  // rank 0 alone prints
  }
  // Speculative decoding with the MTP head (on the last stage; every cache rolls back its own layers):
  // still the same tokens.
  for (const auto& [np, flags] :
       std::vector<layout>{{2, "--tp 2 --draft-tokens 2"}, {4, "--tp 2 --pp 2 --draft-tokens 3"}}) {
    const auto r = run_shell(kMpirun + "-np " + std::to_string(np) + " " + kMoxi + gen + " " + flags + " 2>/dev/null");
    ASSERT_EQ(r.code, 0) << flags;
    EXPECT_EQ(r.out, ref.out) << flags;
  }
}

TEST_F(Distributed, LayoutsThatDoNotFitFailOnEveryRankWithAMessage) {
  const std::string model = init("tiny-seed");
  const std::string logits = kMoxi + " logits -m " + model + " --tokens 1,2,3 --out " + path("x.safetensors");
  struct bad {
    int np;
    std::string flags, message;
  };
  for (const auto& b : std::vector<bad>{
           {2, "--tp 4", "does not fit 2 MPI ranks"},
           {3, "--tp 3", "KDA num_heads 4 is not divisible by tp 3"},
           {3, "--ep 3", "num_experts 16 is not divisible by ep 3"},
           {2, "--tp 2 --dump layers.1.out", "only logits can be dumped"},
       }) {
    const auto r = run_shell(kMpirun + "-np " + std::to_string(b.np) + " " + logits + " " + b.flags + " 2>&1");
    EXPECT_NE(r.code, 0) << b.flags;
    EXPECT_NE(r.code, 124) << b.flags << ": timed out instead of failing";
    EXPECT_NE(r.out.find(b.message), std::string::npos) << b.flags << "\n" << r.out;
  }
}

// A long decode under mpirun (tp 2, 2 ranks); rank 1 gets `sig` once it runs. The job must end non-zero
// within a bounded time, with no rank left behind.
void expect_job_ends_when_rank_gets(int sig, const std::string& dir, const std::string& expect_in_log) {
  testing::set_mpi_env();
  const std::string keep = dir + "/bench-model-" + std::to_string(sig);
  const std::string log = dir + "/mpirun-" + std::to_string(sig) + ".log";
  const pid_t job = testing::spawn_logged(
      {"/usr/bin/mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2", kMoxi, "bench", "decode", "--config",
       std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json", "--keep-dir", keep, "--prompt", "16", "--tokens",
       "10000000", "--ref-tokens", "1", "--tp", "2", "--rank-timeout", "3"},
      log);
  std::vector<pid_t> victim;
  for (int i = 0; i < 600 && victim.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    victim = rank_pids(keep, 1);
  }
  ASSERT_EQ(victim.size(), 1u) << "rank 1 of the job never showed up";
  std::this_thread::sleep_for(std::chrono::seconds(3));  // well into the decode steps
  ASSERT_EQ(::kill(victim[0], sig), 0);
  const int code = wait_for(job, 90);
  if (code < 0) ::kill(job, SIGKILL), wait_for(job, 10);
  EXPECT_GT(code, 0) << "the job did not end within 90 s";
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find(expect_in_log), std::string::npos) << text;
  for (int i = 0; i < 100 && any_process_with(keep); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(any_process_with(keep)) << "a rank outlived its job";
}

TEST_F(Distributed, AKilledRankEndsTheWholeJob) {
  expect_job_ends_when_rank_gets(SIGKILL, dir_, "signal 9");
}

TEST_F(Distributed, AStoppedRankIsNoticedWithinTheRankTimeout) {
  // SIGSTOP: rank 1 neither dies nor answers; rank 0's wait passes --rank-timeout 3 and it ends the job.
  expect_job_ends_when_rank_gets(SIGSTOP, dir_, "an MPI call has waited");
}

}  // namespace
}  // namespace moxi
