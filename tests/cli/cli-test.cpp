// The `moxi` binary end to end: the commands the README runs, their JSON contracts, exit codes and error
// messages for bad input. Figures are checked against docs/model-spec.md §1, not against moxi's own output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/run-moxi.h"
#include "common/temp-dir.h"

namespace fs = std::filesystem;

namespace {

struct result {
  int code;
  std::string out;  // stdout and stderr together
};

result run(const std::string& args) {
  const std::string cmd = std::string(MOXI_BINARY_DIR) + "/moxi " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
}

std::string cfg(const char* name) {
  return std::string(MOXI_SOURCE_DIR) + "/configs/" + name;
}

class Cli : public moxi::testing::temp_dir_test {};

TEST_F(Cli, PlanOnTheSeedConfigReproducesModelMdWithinOnePercent) {
  const auto r = run("plan --config " + cfg("seed-2.8t.json") + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NEAR(j.at("total_params").get<double>(), 2.780e12, 0.01 * 2.780e12);
  EXPECT_NEAR(j.at("active_params").get<double>(), 104.2e9, 0.01 * 104.2e9);
  EXPECT_NEAR(j.at("disk_bytes").get<double>(), 1.560e12, 0.01 * 1.560e12);
  EXPECT_EQ(j.at("num_shards").get<int>(), 96);
}

// moxi bench context on tiny-seed: every context measured (sorted, each decode's tokens added to the
// cache), the prefill curve chunk by chunk along the whole prompt, memory against the f32 plan; bad input
// is an error.
TEST_F(Cli, ContextBenchReportsEveryContextAndThePrefillCurve) {
  const auto r = moxi::testing::run_moxi("bench context --config " + cfg("tiny-seed.json") +
                                             " --contexts 256,64 --chunk 48 --tokens 2 --probe-mib 16 --json",
                                         "", dir_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("prefill"), std::string::npos) << "progress on stderr";
  const auto j = nlohmann::json::parse(r.out);
  const auto& cs = j.at("contexts");
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].at("context").get<int64_t>(), 64);
  EXPECT_EQ(cs[1].at("context").get<int64_t>(), 256 + 4);  // 2 untimed + 2 timed decode steps at 64
  EXPECT_DOUBLE_EQ(cs[0].at("decode_vs_first").get<double>(), 1.0);
  for (const auto& c : cs) {
    EXPECT_GT(c.at("decode_tokens_per_s").get<double>(), 0);
    EXPECT_GT(c.at("plan_mb").get<double>(), 0);
    EXPECT_GE(c.at("peak_mb").get<double>(), c.at("resident_mb").get<double>());
  }
  const auto& curve = j.at("prefill_curve");
  ASSERT_EQ(curve.size(), 6u);  // 48 + 16 to reach 64, then four chunks of 48 to 256
  for (size_t i = 1; i < curve.size(); ++i) EXPECT_GT(curve[i][0].get<int64_t>(), curve[i - 1][0].get<int64_t>());
  EXPECT_EQ(curve.back()[0].get<int64_t>(), 256 + 4);
  EXPECT_FALSE(j.contains("paired"));  // no --rounds
  // --rounds: the first context rebuilt in a cache of its own, then rounds alternating with the long one.
  const auto rr =
      moxi::testing::run_moxi("bench context --config " + cfg("tiny-seed.json") +
                                  " --contexts 100,40 --chunk 32 --tokens 2 --rounds 3 --probe-mib 16 --json",
                              "", dir_);
  ASSERT_EQ(rr.code, 0) << rr.err;
  const auto p = nlohmann::json::parse(rr.out).at("paired");
  EXPECT_EQ(p.at("first_context").get<int64_t>(), 40);
  EXPECT_EQ(p.at("last_context").get<int64_t>(), 100 + 4 + 4);  // the sweep's 2 + 2 decode steps at 40 and at 100
  const auto firsts = p.at("first_tokens_per_s").get<std::vector<double>>();
  const auto lasts = p.at("last_tokens_per_s").get<std::vector<double>>();
  ASSERT_EQ(firsts.size(), 3u);
  ASSERT_EQ(lasts.size(), 3u);
  EXPECT_EQ(p.at("membw_gbs").size(), 3u);
  std::vector<double> ratios;
  for (size_t i = 0; i < 3; ++i) ratios.push_back(lasts[i] / firsts[i]);
  std::sort(ratios.begin(), ratios.end());
  EXPECT_DOUBLE_EQ(p.at("ratio_median").get<double>(), ratios[1]);
  EXPECT_DOUBLE_EQ(p.at("ratio_min").get<double>(), ratios[0]);
  EXPECT_DOUBLE_EQ(p.at("ratio_max").get<double>(), ratios[2]);
  const auto bad = moxi::testing::run_moxi("bench context --config " + cfg("tiny-seed.json") + " --contexts 0", "", dir_);
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--contexts"), std::string::npos) << bad.err;
}

// moxi bench indexer checks its shape before it allocates anything (a real run streams gigabytes, so the
// bit-for-bit check against the reference it ends with is exercised by running it, docs/kernels-mxfp4.md).
TEST_F(Cli, IndexerBenchRejectsAnEmptyShape) {
  for (const char* bad : {"--keys 0", "--heads 0", "--dim 0", "--topk 0"}) {
    const auto r = run(std::string("bench indexer ") + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.out.find("must be >= 1"), std::string::npos) << r.out;
  }
}

TEST_F(Cli, PlanRejectsImpossibleLayoutsWithAMessage) {
  auto r = run("plan --config " + cfg("seed-2.8t.json") + " --tp 3 --nodes 1 --gpus-per-node 8");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("must divide"), std::string::npos) << r.out;
  r = run("plan --config " + cfg("seed-2.8t.json") + " --tp 8 --ep 5");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--ep"), std::string::npos) << r.out;
  r = run("plan --config " + cfg("seed-2.8t.json") +
          " --tp 8 --ep 8 --nodes 8 --device-memory 80 --context 1048576");
  EXPECT_EQ(r.code, 1) << r.out;  // a layout that does not fit is an error (usage-test.cpp: by how much)
  EXPECT_NE(r.out.find("does NOT fit"), std::string::npos) << r.out;
}

TEST_F(Cli, InitInspectQuantizeRoundTrip) {
  auto r =
      run("init --config " + cfg("tiny-kimi-linear.json") + " --out " + dir_ + "/bf16 --shards 2 --seed 9");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("inspect " + dir_ + "/bf16 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("shards").size(), 2u);
  EXPECT_TRUE(j.at("config_check").at("ok").get<bool>());
  EXPECT_EQ(j.at("bytes_by_dtype").count("U8"), 0u);
  r = run("quantize " + dir_ + "/bf16 " + dir_ + "/q");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("inspect " + dir_ + "/q --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_GT(j.at("bytes_by_dtype").at("U8").get<int64_t>(), 0);
  EXPECT_TRUE(j.at("config_check").at("ok").get<bool>());
  r = run("quantize " + dir_ + "/q " + dir_ + "/q2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("already quantized"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(dir_ + "/q2"));
}

TEST_F(Cli, BadConfigsAndFilesAreErrorsNotCrashes) {
  {
    nlohmann::json doc = nlohmann::json::parse(std::ifstream(cfg("tiny-kimi-linear.json")));
    doc["hiden_size"] = 3;  // a typo must not be silently ignored
    std::ofstream(dir_ + "/bad.json") << doc.dump();
  }
  auto r = run("plan --config " + dir_ + "/bad.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("hiden_size"), std::string::npos) << r.out;
  {
    std::ofstream f(dir_ + "/garbage.safetensors", std::ios::binary);
    f << "\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":{\"dtype\":1}}";
  }
  r = run("inspect " + dir_ + "/garbage.safetensors");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("garbage.safetensors"), std::string::npos) << r.out;
  r = run("inspect " + dir_ + "/does-not-exist");
  EXPECT_EQ(r.code, 1) << r.out;
  r = run("plan --config " + dir_ + "/missing.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("missing.json"), std::string::npos) << r.out;
  r = run("init --config " + cfg("tiny-seed.json"));  // --out missing: usage error
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--out"), std::string::npos) << r.out;
}

TEST_F(Cli, HelpListsTheSubcommands) {
  const auto r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* c : {"plan", "init", "inspect", "quantize"})
    EXPECT_NE(r.out.find(c), std::string::npos) << c;
}

}  // namespace

namespace {

// Text a random model generates reaches the terminal as valid UTF-8 without escape sequences.
TEST_F(Cli, GenerateOutputIsTerminalSafe) {
  auto r = run("init --config " + cfg("tiny-seed.json") + " --out " + dir_ + "/ck --seed 3");
  ASSERT_EQ(r.code, 0) << r.out;
  r = run("generate --model " + dir_ + "/ck --prompt Hello --max-tokens 64 --temperature 1 --seed 5");
  ASSERT_EQ(r.code, 0) << r.out;
  for (unsigned char c : r.out) {
    EXPECT_TRUE(c >= 0x20 || c == '\n' || c == '\t') << "control byte " << int(c);
    EXPECT_NE(c, 0x7F);
  }
  // Strict UTF-8 check written here, independent of the sanitizer.
  for (size_t i = 0; i < r.out.size();) {
    const unsigned char c = r.out[i];
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    ASSERT_NE(len, 0u) << "invalid lead byte at " << i;
    ASSERT_LE(i + len, r.out.size());
    for (size_t k = 1; k < len; ++k) ASSERT_EQ(static_cast<unsigned char>(r.out[i + k]) >> 6, 2u) << i;
    i += len;
  }
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
}

}  // namespace
