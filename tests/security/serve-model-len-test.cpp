// C3 (serving part): a config.json max_position_embeddings of 2^62, 2^35 or 2^31 used to be truncated into
// nonsense (max_model_len 16, "block_size must be > 0", bad_alloc after 30 s and 7.9 GB). The serving
// limit is now validated and clamped with a message, and the caches are sized from it, never from the
// model maximum. plan_serving against hand-computed expectations, then real `moxi serve` runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/serve/server.h"
#include "security/serve-harness.h"

namespace moxi::serve {
namespace {

using namespace moxi::security_testing;
using nlohmann::json;

TEST(serve_model_len, PlanClampsHugeModelMaximaAndSizesCachesFromTheServingLimit) {
  server_config cfg;  // block_size 16, no --max-model-len, no --num-blocks
  for (int64_t mpe : {int64_t(1) << 62, int64_t(1) << 35, int64_t(1) << 31, int64_t(40000)}) {
    const auto p = plan_serving(cfg, mpe);
    EXPECT_EQ(p.max_model_len, kDefaultServingLen) << mpe;
    EXPECT_EQ(p.num_blocks, kDefaultServingLen / 16 + 1) << "one longest sequence: 2048 + 1 blocks";
    EXPECT_NE(p.note.find(std::to_string(mpe)), std::string::npos) << p.note;
  }
  const auto small = plan_serving(cfg, 1024);
  EXPECT_EQ(small.max_model_len, 1024);
  EXPECT_EQ(small.num_blocks, 2048);
  EXPECT_TRUE(small.note.empty());
  // An explicit limit is honoured up to the model's and the server's maxima, and refused beyond.
  cfg.max_model_len = 100000;
  const auto asked = plan_serving(cfg, int64_t(1) << 62);
  EXPECT_EQ(asked.max_model_len, 100000);
  EXPECT_EQ(asked.num_blocks, 6250 + 1);
  EXPECT_THROW(plan_serving(cfg, 50000), moxi::error);
  cfg.max_model_len = int64_t(1) << 40;
  EXPECT_THROW(plan_serving(cfg, int64_t(1) << 62), moxi::error);
  cfg.max_model_len = 0;
  cfg.num_blocks = 1 << 30;  // beyond kMaxBlocks
  EXPECT_THROW(plan_serving(cfg, 1024), moxi::error);
  cfg.num_blocks = 64;  // a small pool caps the length it can hold
  EXPECT_EQ(plan_serving(cfg, 1024).max_model_len, 64 * 16);
  EXPECT_THROW(plan_serving(cfg, 1), moxi::error);
  cfg.block_size = 0;
  EXPECT_THROW(plan_serving(cfg, 1024), moxi::error);
}

TEST(serve_model_len, ServeOnHugeMaxPositionEmbeddingsStartsWithTheClampedLimit) {
  moxi::testing::temp_dir dir("moxi-serve-mpe");
  for (int shift : {62, 35, 31}) {
    const std::string model = dir / ("mpe-" + std::to_string(shift));
    std::filesystem::copy(bundled_model(), model, std::filesystem::copy_options::recursive);
    json cfg = json::parse(std::ifstream(model + "/config.json"));
    cfg["max_position_embeddings"] = int64_t(1) << shift;
    std::ofstream(model + "/config.json") << cfg.dump(2);
    serve_process s({}, model);
    if (s.port() == 0) {
      // A loader that refuses such a config must say so and exit cleanly, never crash.
      const auto status = s.wait_exit(30);
      ASSERT_TRUE(status) << s.log();
      EXPECT_TRUE(WIFEXITED(*status)) << "killed by a signal\n" << s.log();
      EXPECT_NE(s.log().find("max_position_embeddings"), std::string::npos) << s.log();
      continue;
    }
    const auto models = exchange(s.port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n");
    ASSERT_EQ(models.status, 200);
    EXPECT_EQ(json::parse(models.body)["data"][0]["max_model_len"], kDefaultServingLen) << shift;
    EXPECT_NE(s.log().find("max_model_len " + std::to_string(kDefaultServingLen)), std::string::npos)
        << s.log();
    const auto r = exchange(s.port(), post_request("/v1/completions", R"({"prompt": "x", "max_tokens": 2})"));
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_LT(s.rss_mib(), 1024) << "caches sized from the model maximum";
  }
}

}  // namespace
}  // namespace moxi::serve
