// `moxi logits` and `moxi generate` end to end on a tiny random checkpoint (moxi init's, with its byte-level
// tokenizer.json): the written logits and dumps equal the in-process forward pass, bad token ids fail with a
// message naming them, and generate streams text and reports its speed. Runs the binary the build made.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "moxi/formats/checkpoint.h"
#include "moxi/formats/convert.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/model.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

class CliForward : public ::testing::Test {
 protected:
  void SetUp() override {
    moxi_ = std::string(MOXI_BINARY_DIR) + "/moxi";
    if (!fs::exists(moxi_)) GTEST_SKIP() << "the moxi binary is not built";
    std::string t = (fs::temp_directory_path() / "moxi-cli-forward-XXXXXX").string();
    ASSERT_TRUE(::mkdtemp(t.data()));
    dir_ = t;
    model::init_options o;
    o.seed = 5;
    o.show_progress = false;
    model::init_checkpoint(model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json"),
                           dir_ + "/ckpt", o);
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  // Runs moxi with args; returns the exit status, stdout and stderr in out_/err_.
  int run(const std::string& args) {
    const std::string cmd = moxi_ + " " + args + " >" + dir_ + "/out.txt 2>" + dir_ + "/err.txt";
    const int rc = std::system(cmd.c_str());
    out_ = slurp(dir_ + "/out.txt");
    err_ = slurp(dir_ + "/err.txt");
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  std::string moxi_, dir_, out_, err_;
};

std::vector<float> read(const formats::checkpoint& ck, const std::string& name) {
  const auto v = ck.view(name);
  std::vector<float> f(size_t(v.numel()));
  formats::to_f32(v.type, v.data, f.size(), f.data());
  return f;
}

TEST_F(CliForward, LogitsAndDumpsEqualTheInProcessForward) {
  const std::vector<token_id> tokens = {1, 72, 101, 108, 108, 111, 300, 7, 9, 11};
  ASSERT_EQ(run("logits --model " + dir_ + "/ckpt --tokens 1,72,101,108,108,111,300,7,9,11 --out " + dir_ +
                "/l.safetensors --dump 'layers.3.mla.*,layers.0.out'"),
            0)
      << err_;
  const auto m = model::model::load(dir_ + "/ckpt");
  auto cache = m.new_cache();
  std::vector<float> out0;
  model::dump_sink sink;
  sink.wants = [](std::string_view n) { return n == "layers.0.out"; };
  sink.put = [&](const std::string&, const std::vector<int64_t>&, const float* d) {
    out0.assign(d, d + 10 * 128);
  };
  model::forward_options fo;
  fo.dump = &sink;
  const auto logits = m.forward(tokens, *cache, fo);
  const auto ck = formats::checkpoint::open(dir_ + "/l.safetensors");
  EXPECT_EQ(ck.entry("logits").shape, (std::vector<int64_t>{10, 512}));
  EXPECT_EQ(read(ck, "logits"), logits);
  EXPECT_EQ(read(ck, "layers.0.out"), out0);
  EXPECT_EQ(ck.entry("layers.3.mla.topk").shape, (std::vector<int64_t>{10, 8}));
  EXPECT_TRUE(ck.contains("layers.3.mla.latent"));

  // Fed in chunks through the cache: the same logits and DSA selections up to the prefill/decode rounding.
  ASSERT_EQ(run("logits --model " + dir_ + "/ckpt --tokens 1,72,101,108,108,111,300,7,9,11 --chunk 3 --out " +
                dir_ + "/c.safetensors --dump layers.5.mla.topk"),
            0)
      << err_;
  const auto cck = formats::checkpoint::open(dir_ + "/c.safetensors");
  const auto chunked = read(cck, "logits");
  ASSERT_EQ(chunked.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) EXPECT_NEAR(chunked[i], logits[i], 1e-4);
  EXPECT_EQ(cck.entry("layers.5.mla.topk").shape, (std::vector<int64_t>{10, 8}));
  const auto topk = read(cck, "layers.5.mla.topk");
  EXPECT_EQ(topk[0], 0.0f);   // the first token sees only itself...
  EXPECT_EQ(topk[1], -1.0f);  // ...and the rest of its row is padding
}

TEST_F(CliForward, LogitsRejectsBadTokensAndUnknownDumps) {
  EXPECT_NE(run("logits --model " + dir_ + "/ckpt --tokens 1,512 --out " + dir_ + "/x.safetensors"), 0);
  EXPECT_NE(err_.find("token id 512 at position 1"), std::string::npos) << err_;
  EXPECT_NE(run("logits --model " + dir_ + "/ckpt --tokens 1,x --out " + dir_ + "/x.safetensors"), 0);
  EXPECT_NE(err_.find("'x'"), std::string::npos) << err_;
  EXPECT_NE(
      run("logits --model " + dir_ + "/ckpt --tokens 1,2 --dump no.such --out " + dir_ + "/x.safetensors"),
      0);
  EXPECT_NE(err_.find("no.such"), std::string::npos) << err_;
  EXPECT_FALSE(fs::exists(dir_ + "/x.safetensors"));
}

TEST_F(CliForward, GenerateStreamsTextAndReportsSpeed) {
  ASSERT_EQ(run("generate --model " + dir_ + "/ckpt --prompt 'Hello' --max-tokens 12 --temperature 0"), 0)
      << err_;
  EXPECT_NE(err_.find("prompt: 5 tokens"), std::string::npos) << err_;
  EXPECT_NE(err_.find("tokens/s"), std::string::npos) << err_;
  const std::string first = out_;
  ASSERT_EQ(run("generate --model " + dir_ + "/ckpt --prompt 'Hello' --max-tokens 12 --temperature 0"), 0)
      << err_;
  EXPECT_EQ(out_, first);  // greedy is deterministic
  ASSERT_EQ(run("generate --model " + dir_ +
                "/ckpt --prompt 'Hello' --max-tokens 12 --temperature 0.8 --top-p 0.9 "
                "--top-k 50 --seed 3"),
            0)
      << err_;
}

}  // namespace
