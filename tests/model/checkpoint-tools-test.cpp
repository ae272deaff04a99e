// moxi init / quantize / inspect, checked against independent facts: the init distributions (moments of
// the documented schemes), the MX codec as the reference for every quantized byte, byte identity of copied
// tensors, the planner's byte arithmetic, and failure modes that must leave nothing behind.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/base/half.h"
#include "moxi/base/mx.h"
#include "moxi/formats/chat-template.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/convert.h"
#include "moxi/formats/model-config.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/inspect.h"
#include "moxi/model/manifest.h"
#include "moxi/model/plan.h"
#include "moxi/model/quantize.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

std::string config_path(const char* name) {
  return std::string(MOXI_SOURCE_DIR) + "/configs/" + name;
}

model::init_options quiet(uint64_t seed, int shards, dtype t = dtype::BF16) {
  model::init_options o;
  o.seed = seed;
  o.num_shards = shards;
  o.float_type = t;
  o.show_progress = false;
  return o;
}

std::vector<float> read_f32(const formats::checkpoint& ck, const std::string& name) {
  const tensor_view v = ck.view(name);
  std::vector<float> out(size_t(v.numel()));
  formats::to_f32(v.type, v.data, out.size(), out.data());
  return out;
}

double mean(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / double(v.size());
}
double stddev(const std::vector<float>& v) {
  const double m = mean(v);
  double s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size()));
}

TEST(Init, DistributionsFollowTheDocumentedSchemes) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-seed.json"));
  model::init_checkpoint(c, t / "ck", quiet(7, 2, dtype::F32));
  const auto ck = formats::checkpoint::open(t / "ck");
  // Embedding: N(0, 0.02); 512 x 128 samples -> std within a few percent.
  const auto emb = read_f32(ck, "model.embed_tokens.weight");
  EXPECT_NEAR(mean(emb), 0.0, 0.02 * 4 / std::sqrt(double(emb.size())));
  EXPECT_NEAR(stddev(emb), 0.02, 0.02 * 0.03);
  // Output projections: std 0.02 / sqrt(2 * num_layers).
  const auto o = read_f32(ck, "model.layers.0.mlp.down_proj.weight");
  EXPECT_NEAR(stddev(o), 0.02 / std::sqrt(2.0 * 6), 0.02 / std::sqrt(12.0) * 0.05);
  for (float x : read_f32(ck, "model.layers.0.input_layernorm.weight")) ASSERT_EQ(x, 1.0f);
  for (float x : read_f32(ck, "model.layers.3.self_attn.indexer.k_norm.bias")) ASSERT_EQ(x, 0.0f);
  for (float x : read_f32(ck, "model.layers.1.block_sparse_moe.gate.e_score_correction_bias"))
    ASSERT_EQ(x, 0.0f);
  for (float x : read_f32(ck, "model.layers.0.self_attn.A_log")) {
    EXPECT_GE(x, 0.0f);
    EXPECT_LT(x, std::log(16.0f));
  }
  for (float x : read_f32(ck, "model.layers.0.self_attn.dt_bias")) {
    const double softplus = std::log1p(std::exp(double(x)));
    EXPECT_GE(softplus, 1e-3 * 0.999);
    EXPECT_LE(softplus, 1e-1 * 1.001);
  }
  for (float x : read_f32(ck, "model.layers.0.self_attn.q_conv1d.weight"))
    EXPECT_LE(std::fabs(x), 0.5f);  // 1/sqrt(4)
  // F32 side tensors stay F32.
  EXPECT_EQ(ck.entry("model.layers.0.self_attn.A_log").type, dtype::F32);
}

TEST(Init, ValuesDependOnSeedAndNameNotOnSharding) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-kimi-linear.json"));
  model::init_checkpoint(c, t / "a", quiet(3, 1));
  model::init_checkpoint(c, t / "b", quiet(3, 4));
  model::init_checkpoint(c, t / "c", quiet(4, 1));
  const auto a = formats::checkpoint::open(t / "a"), b = formats::checkpoint::open(t / "b"),
             cc = formats::checkpoint::open(t / "c");
  EXPECT_EQ(a.shard_paths().size(), 1u);
  EXPECT_EQ(b.shard_paths().size(), 4u);
  ASSERT_EQ(a.names(), b.names());
  for (const auto& n : a.names()) {
    const auto va = a.view(n), vb = b.view(n);
    ASSERT_EQ(va.nbytes, vb.nbytes);
    ASSERT_EQ(std::memcmp(va.data, vb.data, va.nbytes), 0) << n;
  }
  const auto x = a.view("model.embed_tokens.weight"), y = cc.view("model.embed_tokens.weight");
  EXPECT_NE(std::memcmp(x.data, y.data, x.nbytes), 0);
}

TEST(Init, Mxfp4ExpertsAreTheCodecOfTheInitValues) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-seed.json"));
  model::init_checkpoint(c, t / "ck", quiet(11, 3));
  const auto ck = formats::checkpoint::open(t / "ck");
  const auto manifest = model::build_manifest(c);
  int checked = 0;
  for (const auto& d : manifest) {
    if (!d.routed_expert) {
      EXPECT_FALSE(ck.contains(d.name + "_blocks"));
      continue;
    }
    ASSERT_FALSE(ck.contains(d.name)) << d.name;  // only the MXFP4 pair is stored
    const auto blocks = ck.view(d.name + "_blocks"), scales = ck.view(d.name + "_scales");
    EXPECT_EQ(blocks.type, dtype::U8);
    EXPECT_EQ(blocks.shape, (std::vector<int64_t>{d.shape[0], d.shape[1] / 32, 16}));
    EXPECT_EQ(scales.shape, (std::vector<int64_t>{d.shape[0], d.shape[1] / 32}));
    std::vector<float> values(size_t(d.numel()));
    model::init_values(c, d, 11, values.data());
    std::vector<uint8_t> want_b(values.size() / 2), want_s(values.size() / 32);
    mx::quantize_mxfp4(values.data(), values.size(), want_b.data(), want_s.data());
    ASSERT_EQ(std::memcmp(blocks.data, want_b.data(), want_b.size()), 0) << d.name;
    ASSERT_EQ(std::memcmp(scales.data, want_s.data(), want_s.size()), 0) << d.name;
    ++checked;
  }
  // 16 experts x 3 weights x 5 MoE layers + 16 x 3 in the MTP layer.
  EXPECT_EQ(checked, 16 * 3 * 5 + 16 * 3);
}

TEST(Init, PlannerBytesEqualTheWrittenCheckpoint) {
  moxi::testing::temp_dir t;
  for (const char* cfg :
       {"tiny-seed.json", "tiny-kimi-linear.json", "tiny-deepseek-v3.2.json", "tiny-hybrid-swa.json"}) {
    const auto c = model::load_model_config(config_path(cfg));
    const std::string out = t / cfg;
    model::init_checkpoint(c, out, quiet(1, 2));
    const auto rep = model::inspect_checkpoint(out);
    model::plan_options po;
    const auto plan = model::make_plan(c, po);
    EXPECT_EQ(rep.total_bytes, plan.checkpoint_bytes) << cfg;
    EXPECT_EQ(rep.params, plan.total_params + plan.mtp_params + plan.vision_params) << cfg;
    EXPECT_TRUE(rep.has_config);
    EXPECT_TRUE(rep.config_ok()) << cfg;
    EXPECT_TRUE(rep.unexpected.empty()) << cfg;
  }
}

TEST(Init, WritesAByteLevelTokenizerThatRoundTripsText) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-seed.json"));  // pad 0, bos 1, eos 2
  model::init_checkpoint(c, t / "ck", quiet(1, 1));
  const auto tok = moxi::formats::tokenizer::from_hf_json_file(t / "ck/tokenizer.json");
  // Specials keep their config ids; byte b takes the b-th free id, i.e. b + 3 here.
  EXPECT_EQ(tok.find("<|eos|>"), std::optional<moxi::token_id>(2));
  const std::string text = "Hi, w\xc3\xb6rld \xe4\xb8\x96\xe7\x95\x8c\n";
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(ids[i], int(static_cast<unsigned char>(text[i])) + 3) << i;
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_EQ(tok.encode("<|bos|>a"), (std::vector<moxi::token_id>{1, 'a' + 3}));
}

// The chat specials take the top ids, the checkpoint carries moxi-tiny's template, and <|end|> stops
// generation: the rendered conversation tokenizes to the specials' ids around byte tokens.
TEST(Init, GivesTheCheckpointMoxiTinysChatTemplate) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-seed.json"));  // vocab 512, pad 0, bos 1, eos 2
  model::init_checkpoint(c, t / "ck", quiet(1, 1));
  const auto tok = moxi::formats::tokenizer::from_hf_json_file(t / "ck/tokenizer.json");
  EXPECT_EQ(tok.find("<|system|>"), std::optional<moxi::token_id>(508));
  EXPECT_EQ(tok.find("<|user|>"), std::optional<moxi::token_id>(509));
  EXPECT_EQ(tok.find("<|assistant|>"), std::optional<moxi::token_id>(510));
  EXPECT_EQ(tok.find("<|end|>"), std::optional<moxi::token_id>(511));
  const auto tpl = formats::load_chat_template(t / "ck");
  ASSERT_TRUE(tpl.has_value());
  formats::render_options opt;
  opt.add_generation_prompt = true;
  const std::string prompt =
      tpl->render(nlohmann::json::parse(R"([{"role": "user", "content": "ab"}])"), opt);
  EXPECT_EQ(prompt, "<|bos|><|user|>ab<|end|>\n<|assistant|>\n");
  EXPECT_EQ(tok.encode(prompt),
            (std::vector<moxi::token_id>{1, 509, 'a' + 3, 'b' + 3, 511, '\n' + 3, 510, '\n' + 3}));
  std::ifstream in(t / "ck/generation_config.json");
  const auto gen = nlohmann::json::parse(in);
  EXPECT_EQ(gen["eos_token_id"], nlohmann::json::parse("[2, 511]"));
}

TEST(Init, CreatesMissingParentDirectories) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-kimi-linear.json"));
  model::init_checkpoint(c, t / "a/b/ck", quiet(1, 1));
  EXPECT_TRUE(fs::exists(t / "a/b/ck/model.safetensors.index.json"));
}

TEST(Init, RefusesAnExistingDirectoryAndLeavesNoTemp) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-kimi-linear.json"));
  fs::create_directory(t / "exists");
  EXPECT_THROW(model::init_checkpoint(c, t / "exists", quiet(1, 1)), moxi::error);
  for (const auto& e : fs::directory_iterator(t.path())) EXPECT_EQ(e.path().filename(), "exists");
}

TEST(Quantize, ExpertsMatchTheCodecAndEverythingElseIsCopied) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-kimi-linear.json"));
  model::init_checkpoint(c, t / "bf16", quiet(5, 2));
  model::quantize_options qo;
  qo.show_progress = false;
  qo.num_shards = 3;
  const auto rep = model::quantize_checkpoint(t / "bf16", t / "q", qo);
  const auto in = formats::checkpoint::open(t / "bf16"), out = formats::checkpoint::open(t / "q");
  EXPECT_EQ(out.shard_paths().size(), 3u);
  const auto qc = model::load_model_config(t / "q");
  ASSERT_TRUE(qc.quant);
  EXPECT_EQ(qc.quant->method, formats::quant_method::MXFP4);
  EXPECT_EQ(qc.quant->activations, formats::act_format::MXFP8_E4M3);
  int64_t experts = 0, copied = 0;
  for (const auto& d : model::build_manifest(c)) {
    const auto src = in.view(d.name);
    if (!d.routed_expert) {
      const auto dst = out.view(d.name);
      ASSERT_EQ(dst.type, src.type);
      ASSERT_EQ(dst.nbytes, src.nbytes);
      ASSERT_EQ(std::memcmp(dst.data, src.data, src.nbytes), 0) << d.name;
      ++copied;
      continue;
    }
    // Reference: BF16 -> f32 by the bit rule (upper half of the float), then the MX codec.
    std::vector<float> values(size_t(src.numel()));
    for (size_t i = 0; i < values.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, src.data + 2 * i, 2);
      uint32_t bits = uint32_t(h) << 16;
      std::memcpy(&values[i], &bits, 4);
    }
    std::vector<uint8_t> want_b(values.size() / 2), want_s(values.size() / 32);
    mx::quantize_mxfp4(values.data(), values.size(), want_b.data(), want_s.data());
    const auto b = out.view(d.name + "_blocks"), s = out.view(d.name + "_scales");
    ASSERT_EQ(std::memcmp(b.data, want_b.data(), want_b.size()), 0) << d.name;
    ASSERT_EQ(std::memcmp(s.data, want_s.data(), want_s.size()), 0) << d.name;
    // Dequantized values stay within the MX error bound of the source: half a step of the FP4 grid at the
    // block scale (1 step = 2 * 2^(scale-127) near the top of the range) or the clamp at 6 * scale.
    std::vector<float> deq(values.size());
    mx::dequantize_mxfp4(reinterpret_cast<const uint8_t*>(b.data), reinterpret_cast<const uint8_t*>(s.data),
                         values.size(), deq.data());
    for (size_t i = 0; i < values.size(); ++i) {
      const float scale = std::ldexp(1.0f, int(reinterpret_cast<const uint8_t*>(s.data)[i / 32]) - 127);
      ASSERT_LE(std::fabs(deq[i] - values[i]), 2.0f * scale + 1e-30f) << d.name << " " << i;
    }
    EXPECT_FALSE(out.contains(d.name));
    ++experts;
  }
  EXPECT_EQ(experts, rep.quantized_tensors);
  EXPECT_EQ(copied, rep.copied_tensors);
  EXPECT_EQ(experts, 8 * 3 * 3);  // 8 experts x 3 weights x 3 MoE layers (layer 0 is dense)
  // The quantized checkpoint matches its own config exactly, as init would have written it.
  const auto report = model::inspect_checkpoint(t / "q");
  EXPECT_TRUE(report.config_ok());
  EXPECT_TRUE(report.unexpected.empty());
}

TEST(Quantize, RefusesQuantizedInputAndLeavesNothingOnFailure) {
  moxi::testing::temp_dir t;
  const auto c = model::load_model_config(config_path("tiny-seed.json"));  // MXFP4 already
  model::init_checkpoint(c, t / "mx", quiet(1, 1));
  model::quantize_options qo;
  qo.show_progress = false;
  try {
    model::quantize_checkpoint(t / "mx", t / "out", qo);
    FAIL() << "quantizing twice must be refused";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("already quantized"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(t / "out"));

  // A BF16 checkpoint whose expert has the wrong shape: error names the tensor; no output appears.
  const auto k = model::load_model_config(config_path("tiny-kimi-linear.json"));
  const std::string bad = t / "bad";
  fs::create_directory(bad);
  fs::copy_file(config_path("tiny-kimi-linear.json"), bad + "/config.json");
  std::vector<uint16_t> w(64 * 96, 0);
  formats::write_safetensors(
      bad + "/model.safetensors",
      {{{"model.layers.1.block_sparse_moe.experts.0.w1.weight", dtype::BF16, {64, 96}}, w.data()}});
  try {
    model::quantize_checkpoint(bad, t / "out2", qo);
    FAIL() << "a wrong expert shape must be refused";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("experts.0.w1.weight"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(t / "out2"));
  for (const auto& e : fs::directory_iterator(t.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(Inspect, ReportsMissingAndMismatchedTensorsAgainstTheConfig) {
  moxi::testing::temp_dir t;
  const std::string dir = t / "ck";
  fs::create_directory(dir);
  fs::copy_file(config_path("tiny-kimi-linear.json"), dir + "/config.json");
  std::vector<uint16_t> emb(512 * 128, 0), wrong(7, 0);
  formats::write_safetensors(dir + "/model.safetensors",
                             {{{"model.embed_tokens.weight", dtype::BF16, {512, 128}}, emb.data()},
                              {{"model.norm.weight", dtype::BF16, {7}}, wrong.data()},
                              {{"not.in.the.config", dtype::BF16, {7}}, wrong.data()}});
  const auto r = model::inspect_checkpoint(dir);
  ASSERT_TRUE(r.has_config);
  EXPECT_FALSE(r.config_ok());
  EXPECT_EQ(r.mismatched.size(), 1u);
  EXPECT_NE(r.mismatched[0].find("model.norm.weight"), std::string::npos);
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"not.in.the.config"});
  EXPECT_TRUE(std::find(r.missing.begin(), r.missing.end(), "lm_head.weight") != r.missing.end());
  EXPECT_EQ(r.params, 512 * 128 + 7 + 7);
  EXPECT_EQ(r.bytes_by_dtype.at("BF16"), uint64_t(2 * (512 * 128 + 14)));
}

}  // namespace
