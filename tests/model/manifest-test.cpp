// The tensor manifest and its storage layout, checked against HF names and shapes written out here from
// the public modeling code (Kimi-Linear modeling_kimi.py via docs/kimi-linear.md §1.2/§3, DeepSeek-V3.2 via
// docs/deepseek.md §A.2/§B.2/§E.1, MoonViT via docs/kimi-linear.md §5) and docs/model-spec.md §4-5, not
// against the manifest's own output.
#include "moxi/model/manifest.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/model/config.h"

namespace moxi::model {
namespace {

using formats::model_config;
using model::load_model_config;
using shape_t = std::vector<int64_t>;

std::string config_path(const std::string& name) {
  return std::string(MOXI_SOURCE_DIR) + "/configs/" + name;
}

std::map<std::string, const tensor_decl*> by_name(const std::vector<tensor_decl>& m) {
  std::map<std::string, const tensor_decl*> out;
  for (const auto& d : m) out[d.name] = &d;
  return out;
}

std::map<std::string, const stored_tensor*> by_name(const std::vector<stored_tensor>& s) {
  std::map<std::string, const stored_tensor*> out;
  for (const auto& t : s) out[t.name] = &t;
  return out;
}

struct expected_tensor {
  std::string name;
  shape_t shape;
};

void expect_tensors(const std::vector<tensor_decl>& manifest, const std::vector<expected_tensor>& want) {
  const auto idx = by_name(manifest);
  for (const auto& w : want) {
    auto it = idx.find(w.name);
    if (it == idx.end()) {
      ADD_FAILURE() << "missing tensor " << w.name;
      continue;
    }
    EXPECT_EQ(it->second->shape, w.shape) << w.name;
  }
}

void expect_absent(const std::vector<tensor_decl>& manifest, const std::vector<std::string>& names) {
  const auto idx = by_name(manifest);
  for (const auto& n : names) EXPECT_EQ(idx.count(n), 0u) << "unexpected tensor " << n;
}

TEST(ManifestTest, NamesAreUniqueForEveryShippedConfig) {
  for (const char* cfg : {"tiny-seed.json", "tiny-kimi-linear.json", "tiny-deepseek-v3.2.json",
                          "seed-2.8t.json", "kimi-linear-48b-a3b.json", "deepseek-v3.2.json"}) {
    SCOPED_TRACE(cfg);
    const auto c = load_model_config(config_path(cfg));
    const auto m = build_manifest(c);
    std::set<std::string> names;
    for (const auto& d : m) {
      EXPECT_TRUE(names.insert(d.name).second) << "duplicate " << d.name;
      EXPECT_FALSE(d.shape.empty()) << d.name;
      for (int64_t x : d.shape) EXPECT_GT(x, 0) << d.name;
    }
    std::set<std::string> stored;
    for (const auto& s : storage_layout(c, m, dtype::BF16))
      EXPECT_TRUE(stored.insert(s.name).second) << "duplicate stored " << s.name;
  }
}

// tiny-seed: H=128, V=512, 6 layers (KDA 0,1,2,4; Gated DSA 3,5), KDA 4 heads x 16, MLA 4 heads, q_lora 48,
// kv_lora 32, nope 16, rope 8, v 16, indexer 4 x 16, 16 experts of 64 in a 64 latent, 2 shared, MTP at 6.
TEST(ManifestTest, TinySeedHasTheHfNamesAndShapes) {
  const auto c = load_model_config(config_path("tiny-seed.json"));
  const auto m = build_manifest(c);
  const std::string L0 = "model.layers.0.", L1 = "model.layers.1.", L3 = "model.layers.3.";
  const std::string L6 = "model.layers.6.";
  expect_tensors(m,
                 {
                     {"model.embed_tokens.weight", {512, 128}},
                     {L0 + "input_layernorm.weight", {128}},
                     {L0 + "post_attention_layernorm.weight", {128}},
                     // KDA (full-rank output gate).
                     {L0 + "self_attn.q_proj.weight", {64, 128}},
                     {L0 + "self_attn.k_proj.weight", {64, 128}},
                     {L0 + "self_attn.v_proj.weight", {64, 128}},
                     {L0 + "self_attn.q_conv1d.weight", {64, 1, 4}},
                     {L0 + "self_attn.k_conv1d.weight", {64, 1, 4}},
                     {L0 + "self_attn.v_conv1d.weight", {64, 1, 4}},
                     {L0 + "self_attn.f_a_proj.weight", {16, 128}},
                     {L0 + "self_attn.f_b_proj.weight", {64, 16}},
                     {L0 + "self_attn.b_proj.weight", {4, 128}},
                     {L0 + "self_attn.A_log", {1, 1, 4, 1}},
                     {L0 + "self_attn.dt_bias", {64}},
                     {L0 + "self_attn.g_proj.weight", {64, 128}},
                     {L0 + "self_attn.o_norm.weight", {16}},
                     {L0 + "self_attn.o_proj.weight", {128, 64}},
                     // Dense layer 0 (first_k_dense_replace 1).
                     {L0 + "mlp.gate_proj.weight", {256, 128}},
                     {L0 + "mlp.up_proj.weight", {256, 128}},
                     {L0 + "mlp.down_proj.weight", {128, 256}},
                     // Gated DSA layer 3 (1-based 4).
                     {L3 + "self_attn.q_a_proj.weight", {48, 128}},
                     {L3 + "self_attn.q_a_layernorm.weight", {48}},
                     {L3 + "self_attn.q_b_proj.weight", {4 * (16 + 8), 48}},
                     {L3 + "self_attn.kv_a_proj_with_mqa.weight", {32 + 8, 128}},
                     {L3 + "self_attn.kv_a_layernorm.weight", {32}},
                     {L3 + "self_attn.kv_b_proj.weight", {4 * (16 + 16), 32}},
                     {L3 + "self_attn.g_proj.weight", {4 * 16, 128}},
                     {L3 + "self_attn.o_proj.weight", {128, 4 * 16}},
                     {L3 + "self_attn.indexer.wq_b.weight", {4 * 16, 48}},
                     {L3 + "self_attn.indexer.wk.weight", {16, 128}},
                     {L3 + "self_attn.indexer.k_norm.weight", {16}},
                     {L3 + "self_attn.indexer.k_norm.bias", {16}},
                     {L3 + "self_attn.indexer.weights_proj.weight", {4, 128}},
                     // MoE layer 1 (latent MoE).
                     {L1 + "block_sparse_moe.gate.weight", {16, 128}},
                     {L1 + "block_sparse_moe.gate.e_score_correction_bias", {16}},
                     {L1 + "block_sparse_moe.latent_down_proj.weight", {64, 128}},
                     {L1 + "block_sparse_moe.latent_norm.weight", {64}},
                     {L1 + "block_sparse_moe.latent_up_proj.weight", {128, 64}},
                     {L1 + "block_sparse_moe.experts.0.w1.weight", {64, 64}},
                     {L1 + "block_sparse_moe.experts.0.w2.weight", {64, 64}},
                     {L1 + "block_sparse_moe.experts.0.w3.weight", {64, 64}},
                     {L1 + "block_sparse_moe.experts.15.w2.weight", {64, 64}},
                     {L1 + "block_sparse_moe.shared_experts.gate_proj.weight", {2 * 64, 128}},
                     {L1 + "block_sparse_moe.shared_experts.up_proj.weight", {2 * 64, 128}},
                     {L1 + "block_sparse_moe.shared_experts.down_proj.weight", {128, 2 * 64}},
                     {"model.layers.5.block_sparse_moe.experts.3.w3.weight", {64, 64}},
                     // MTP at layer num_layers (DeepSeek-V3 layout, reference §E.1), with a Gated DSA block.
                     {L6 + "enorm.weight", {128}},
                     {L6 + "hnorm.weight", {128}},
                     {L6 + "eh_proj.weight", {128, 256}},
                     {L6 + "input_layernorm.weight", {128}},
                     {L6 + "self_attn.q_a_proj.weight", {48, 128}},
                     {L6 + "self_attn.indexer.wq_b.weight", {64, 48}},
                     {L6 + "post_attention_layernorm.weight", {128}},
                     {L6 + "block_sparse_moe.experts.0.w1.weight", {64, 64}},
                     {L6 + "shared_head.norm.weight", {128}},
                     {"model.norm.weight", {128}},
                     {"lm_head.weight", {512, 128}},
                     // MoonViT tower + projector.
                     {"vision_tower.patch_embed.proj.weight", {64, 3, 14, 14}},
                     {"vision_tower.patch_embed.pos_emb.weight", {8, 8, 64}},
                     {"vision_tower.encoder.blocks.0.wqkv.weight", {192, 64}},
                     {"vision_tower.encoder.blocks.1.mlp.fc0.weight", {128, 64}},
                     {"vision_tower.encoder.blocks.1.mlp.fc1.weight", {64, 128}},
                     {"vision_tower.encoder.final_layernorm.weight", {64}},
                     {"multi_modal_projector.linear_1.weight", {256, 256}},
                     {"multi_modal_projector.linear_2.weight", {128, 256}},
                 });
  expect_absent(m, {
                       "model.layers.0.block_sparse_moe.gate.weight",  // layer 0 is dense
                       "model.layers.1.mlp.gate_proj.weight",          // layer 1 is MoE
                       "model.layers.0.self_attn.g_a_proj.weight",     // full-rank gate only
                       "model.layers.3.self_attn.q_proj.weight",       // q_lora_rank set
                       "model.layers.3.self_attn.q_conv1d.weight",     // layer 3 is not KDA
                       "model.layers.4.self_attn.q_a_proj.weight",     // layer 4 (1-based 5) is KDA
                       "model.layers.1.block_sparse_moe.experts.16.w1.weight",
                       "model.layers.6.embed_tokens.weight",  // shared with the main model
                       "model.layers.6.shared_head.head.weight",
                       "model.layers.7.input_layernorm.weight",
                       "vision_tower.encoder.blocks.2.wqkv.weight",
                   });
  // Layer indices and the routed-expert flag.
  const auto idx = by_name(m);
  EXPECT_EQ(idx.at("model.layers.6.eh_proj.weight")->layer, 6);
  EXPECT_EQ(idx.at("model.layers.6.eh_proj.weight")->group, param_group::MTP);
  EXPECT_EQ(idx.at("model.layers.6.block_sparse_moe.experts.0.w1.weight")->group, param_group::MTP);
  EXPECT_TRUE(idx.at("model.layers.6.block_sparse_moe.experts.0.w1.weight")->routed_expert);
  EXPECT_EQ(idx.at("model.layers.3.self_attn.g_proj.weight")->layer, 3);
  EXPECT_EQ(idx.at("model.embed_tokens.weight")->layer, -1);
  EXPECT_TRUE(idx.at("model.layers.1.block_sparse_moe.experts.0.w1.weight")->routed_expert);
  EXPECT_FALSE(idx.at("model.layers.1.block_sparse_moe.shared_experts.gate_proj.weight")->routed_expert);
  EXPECT_EQ(idx.at("model.layers.0.self_attn.A_log")->group, param_group::KDA);
  EXPECT_EQ(idx.at("model.layers.3.self_attn.indexer.wk.weight")->group, param_group::MLA);
  EXPECT_TRUE(idx.at("model.layers.0.self_attn.A_log")->fp32);
  EXPECT_TRUE(idx.at("model.layers.0.self_attn.dt_bias")->fp32);
  EXPECT_TRUE(idx.at("model.layers.1.block_sparse_moe.gate.e_score_correction_bias")->fp32);
  EXPECT_FALSE(idx.at("model.layers.0.self_attn.q_proj.weight")->fp32);

  // Counting by prefix: 16 x 3 routed weights per MoE layer (1..5) and in the MTP layer.
  int routed = 0;
  for (const auto& d : m) routed += d.routed_expert;
  EXPECT_EQ(routed, 16 * 3 * (5 + 1));
}

// Orientation of the latent-MoE experts (w1/w3 [I, W], w2 [W, I]) and shared experts on the full seed,
// where the sizes differ: I = 3072, latent W = 3584, H = 7168, 2 shared experts.
TEST(ManifestTest, SeedExpertOrientationAndCounts) {
  const auto c = load_model_config(config_path("seed-2.8t.json"));
  const auto m = build_manifest(c);
  const std::string p = "model.layers.92.block_sparse_moe.";
  expect_tensors(m, {
                        {p + "experts.895.w1.weight", {3072, 3584}},
                        {p + "experts.895.w3.weight", {3072, 3584}},
                        {p + "experts.895.w2.weight", {3584, 3072}},
                        {p + "latent_down_proj.weight", {3584, 7168}},
                        {p + "latent_up_proj.weight", {7168, 3584}},
                        {p + "shared_experts.gate_proj.weight", {6144, 7168}},
                        {p + "shared_experts.down_proj.weight", {7168, 6144}},
                        {"model.layers.92.self_attn.indexer.wq_b.weight", {64 * 128, 1536}},
                        {"model.layers.92.self_attn.g_proj.weight", {96 * 128, 7168}},
                        {"model.layers.90.self_attn.g_proj.weight", {96 * 128, 7168}},  // KDA full-rank gate
                        {"model.layers.90.self_attn.A_log", {1, 1, 96, 1}},
                        {"model.layers.93.eh_proj.weight", {7168, 14336}},
                        {"model.layers.0.mlp.down_proj.weight", {7168, 33792}},
                    });
  // MoonViT tower (without the projector) is ~401 M parameters (docs/model-spec.md §1).
  int64_t tower = 0;
  for (const auto& d : m)
    if (d.name.rfind("vision_tower.", 0) == 0) tower += d.numel();
  EXPECT_NEAR(double(tower), 401e6, 0.01 * 401e6);
}

TEST(ManifestTest, KimiLinearUsesDirectQueryAndLowRankGate) {
  const auto c = load_model_config(config_path("tiny-kimi-linear.json"));
  const auto m = build_manifest(c);
  // H=128, KDA 4 x 16 (P=64), MLA 4 heads, nope 16 + rope 8, v 16, kv_lora 32, 8 experts of 64, 1 shared.
  expect_tensors(m, {
                        {"model.layers.0.self_attn.g_a_proj.weight", {16, 128}},
                        {"model.layers.0.self_attn.g_b_proj.weight", {64, 16}},
                        {"model.layers.3.self_attn.q_proj.weight", {4 * 24, 128}},
                        {"model.layers.3.self_attn.kv_a_proj_with_mqa.weight", {40, 128}},
                        {"model.layers.3.self_attn.kv_b_proj.weight", {4 * 32, 32}},
                        {"model.layers.3.self_attn.o_proj.weight", {128, 64}},
                        {"model.layers.1.block_sparse_moe.experts.7.w1.weight", {64, 128}},
                        {"model.layers.1.block_sparse_moe.experts.7.w2.weight", {128, 64}},
                        {"model.layers.1.block_sparse_moe.shared_experts.up_proj.weight", {64, 128}},
                    });
  expect_absent(m, {"model.layers.0.self_attn.g_proj.weight", "model.layers.3.self_attn.q_a_proj.weight",
                    "model.layers.3.self_attn.g_proj.weight", "model.layers.3.self_attn.indexer.wk.weight",
                    "model.layers.1.block_sparse_moe.latent_down_proj.weight", "model.layers.4.enorm.weight",
                    "vision_tower.patch_embed.proj.weight"});
}

TEST(ManifestTest, DeepSeekTinyUsesMlpExpertNames) {
  const auto c = load_model_config(config_path("tiny-deepseek-v3.2.json"));
  const auto m = build_manifest(c);
  // H=128, 3 layers (0 dense), 16 experts of 64, 1 shared, MLA 4 heads, q_lora 48, MTP at layer 3.
  expect_tensors(m, {
                        {"model.layers.0.mlp.gate_proj.weight", {256, 128}},
                        {"model.layers.0.mlp.down_proj.weight", {128, 256}},
                        {"model.layers.1.mlp.gate.weight", {16, 128}},
                        {"model.layers.1.mlp.gate.e_score_correction_bias", {16}},
                        {"model.layers.1.mlp.experts.0.gate_proj.weight", {64, 128}},
                        {"model.layers.1.mlp.experts.0.up_proj.weight", {64, 128}},
                        {"model.layers.1.mlp.experts.15.down_proj.weight", {128, 64}},
                        {"model.layers.2.mlp.shared_experts.gate_proj.weight", {64, 128}},
                        {"model.layers.0.self_attn.q_a_proj.weight", {48, 128}},
                        {"model.layers.0.self_attn.indexer.wq_b.weight", {4 * 16, 48}},
                        {"model.layers.3.enorm.weight", {128}},
                        {"model.layers.3.hnorm.weight", {128}},
                        {"model.layers.3.eh_proj.weight", {128, 256}},
                        {"model.layers.3.self_attn.kv_b_proj.weight", {4 * 32, 32}},
                        {"model.layers.3.mlp.experts.0.gate_proj.weight", {64, 128}},
                        {"model.layers.3.shared_head.norm.weight", {128}},
                        {"lm_head.weight", {512, 128}},
                    });
  expect_absent(m, {"model.layers.1.block_sparse_moe.gate.weight", "model.layers.1.mlp.experts.0.w1.weight",
                    "model.layers.0.self_attn.g_proj.weight", "model.layers.0.mlp.gate.weight",
                    "model.layers.3.embed_tokens.weight", "model.layers.3.shared_head.head.weight",
                    "model.layers.4.enorm.weight"});
}

// MXFP4 (docs/model-spec.md §4): U8 <weight>_blocks [out, in/32, 16], <weight>_scales [out, in/32] for routed
// experts only; everything else BF16, the F32-kept tensors F32.
TEST(ManifestTest, Mxfp4StorageForRoutedExpertsOnly) {
  const auto c = load_model_config(config_path("seed-2.8t.json"));
  const auto m = build_manifest(c);
  const auto s = storage_layout(c, m, dtype::BF16);
  const auto idx = by_name(s);
  const std::string e = "model.layers.5.block_sparse_moe.experts.17.";
  ASSERT_TRUE(idx.count(e + "w1.weight_blocks"));
  EXPECT_EQ(idx.at(e + "w1.weight_blocks")->type, dtype::U8);
  EXPECT_EQ(idx.at(e + "w1.weight_blocks")->shape, (shape_t{3072, 3584 / 32, 16}));
  EXPECT_EQ(idx.at(e + "w1.weight_blocks")->kind, stored_tensor::role::MX_BLOCKS);
  EXPECT_EQ(idx.at(e + "w1.weight_scales")->type, dtype::U8);
  EXPECT_EQ(idx.at(e + "w1.weight_scales")->shape, (shape_t{3072, 3584 / 32}));
  EXPECT_EQ(idx.at(e + "w1.weight_scales")->kind, stored_tensor::role::MX_SCALES);
  EXPECT_EQ(idx.at(e + "w2.weight_blocks")->shape, (shape_t{3584, 3072 / 32, 16}));
  EXPECT_EQ(idx.at(e + "w2.weight_scales")->shape, (shape_t{3584, 3072 / 32}));
  EXPECT_EQ(idx.count(e + "w1.weight"), 0u);
  // Bytes: 4.25 bits per weight.
  const uint64_t numel = 3072ull * 3584;
  EXPECT_EQ(idx.at(e + "w1.weight_blocks")->nbytes() + idx.at(e + "w1.weight_scales")->nbytes(),
            numel / 2 + numel / 32);
  // Not quantized: shared experts, latent projections, router, attention, MTP shared parts.
  const std::string p = "model.layers.5.block_sparse_moe.";
  for (const std::string& n :
       {p + "shared_experts.gate_proj.weight", p + "latent_down_proj.weight", p + "gate.weight",
        std::string("model.layers.5.self_attn.q_proj.weight"), std::string("model.layers.93.eh_proj.weight"),
        std::string("lm_head.weight")}) {
    ASSERT_TRUE(idx.count(n)) << n;
    EXPECT_EQ(idx.at(n)->type, dtype::BF16) << n;
    EXPECT_EQ(idx.at(n)->kind, stored_tensor::role::PLAIN) << n;
  }
  EXPECT_EQ(idx.at("model.layers.5.self_attn.A_log")->type, dtype::F32);
  EXPECT_EQ(idx.at(p + "gate.e_score_correction_bias")->type, dtype::F32);
  EXPECT_EQ(idx.at("model.layers.93.block_sparse_moe.experts.0.w3.weight_blocks")->type, dtype::U8);
  // Every U8 tensor is an MX pair member of a routed expert, and every routed expert has both halves.
  size_t blocks = 0, scales = 0;
  for (const auto& t : s) {
    if (t.type != dtype::U8) continue;
    EXPECT_TRUE(m[t.decl_index].routed_expert) << t.name;
    blocks += t.kind == stored_tensor::role::MX_BLOCKS;
    scales += t.kind == stored_tensor::role::MX_SCALES;
  }
  EXPECT_EQ(blocks, size_t(3 * 896 * (92 + 1)));
  EXPECT_EQ(scales, blocks);
}

TEST(ManifestTest, UnquantizedConfigStoresExpertsAsPlainFloats) {
  auto doc = nlohmann::json::parse(std::ifstream(config_path("tiny-seed.json")));
  doc.erase("quantization_config");
  const auto c = model::parse_model_config(doc, "tiny-seed-unquantized");
  const auto m = build_manifest(c);
  for (dtype f : {dtype::BF16, dtype::F32}) {
    const auto s = storage_layout(c, m, f);
    ASSERT_EQ(s.size(), m.size());
    for (size_t i = 0; i < s.size(); ++i) {
      EXPECT_EQ(s[i].name, m[i].name);
      EXPECT_EQ(s[i].shape, m[i].shape);
      EXPECT_EQ(s[i].type, m[i].fp32 ? dtype::F32 : f) << s[i].name;
      EXPECT_EQ(s[i].kind, stored_tensor::role::PLAIN);
    }
  }
}

// DeepSeek FP8 checkpoints: Linear weights F8_E4M3 + F32 weight_scale_inv per [128, 128] block (rounded up);
// embedding, lm_head, norms, router and the indexer's weights_proj stay BF16 (reference §A.2).
TEST(ManifestTest, Fp8BlockStorageForDeepSeek) {
  const auto c = load_model_config(config_path("deepseek-v3.2.json"));
  const auto m = build_manifest(c);
  const auto s = storage_layout(c, m, dtype::BF16);
  const auto idx = by_name(s);
  const std::string a = "model.layers.10.self_attn.";
  EXPECT_EQ(idx.at(a + "kv_a_proj_with_mqa.weight")->type, dtype::F8_E4M3);
  EXPECT_EQ(idx.at(a + "kv_a_proj_with_mqa.weight")->shape, (shape_t{576, 7168}));
  EXPECT_EQ(idx.at(a + "kv_a_proj_with_mqa.weight_scale_inv")->type, dtype::F32);
  EXPECT_EQ(idx.at(a + "kv_a_proj_with_mqa.weight_scale_inv")->shape, (shape_t{5, 56}));  // ceil(576/128)
  EXPECT_EQ(idx.at(a + "q_b_proj.weight_scale_inv")->shape, (shape_t{128 * 192 / 128, 1536 / 128}));
  EXPECT_EQ(idx.at(a + "indexer.wk.weight")->type, dtype::F8_E4M3);
  EXPECT_EQ(idx.at(a + "indexer.weights_proj.weight")->type, dtype::BF16);
  EXPECT_EQ(idx.count(a + "indexer.weights_proj.weight_scale_inv"), 0u);
  EXPECT_EQ(idx.at(a + "indexer.k_norm.bias")->type, dtype::F32);
  EXPECT_EQ(idx.at(a + "kv_a_layernorm.weight")->type, dtype::BF16);
  EXPECT_EQ(idx.at("model.layers.10.mlp.gate.weight")->type, dtype::BF16);
  EXPECT_EQ(idx.at("model.layers.10.mlp.experts.255.down_proj.weight")->type, dtype::F8_E4M3);
  EXPECT_EQ(idx.at("model.layers.10.mlp.experts.255.down_proj.weight_scale_inv")->shape, (shape_t{56, 16}));
  EXPECT_EQ(idx.at("model.embed_tokens.weight")->type, dtype::BF16);
  EXPECT_EQ(idx.at("lm_head.weight")->type, dtype::BF16);
  EXPECT_EQ(idx.count("model.layers.10.mlp.experts.0.gate_proj.weight_blocks"), 0u);
}

TEST(ManifestTest, DsaWithoutQueryLatentIsAnErrorNamingTheField) {
  auto doc = nlohmann::json::parse(std::ifstream(config_path("tiny-seed.json")));
  doc["q_lora_rank"] = nullptr;
  const auto c = model::parse_model_config(doc, "no-q-lora.json");
  try {
    build_manifest(c);
    FAIL() << "DSA without q_lora_rank was accepted";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("no-q-lora.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("q_lora_rank"), std::string::npos) << e.what();
  }
}

TEST(ManifestTest, MxNamesFollowGptOss) {
  EXPECT_EQ(mx_blocks_name("a.experts.0.w1.weight"), "a.experts.0.w1.weight_blocks");
  EXPECT_EQ(mx_scales_name("a.experts.0.w1.weight"), "a.experts.0.w1.weight_scales");
}

}  // namespace
}  // namespace moxi::model
