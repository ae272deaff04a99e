// The planner (`moxi plan`) against independent references: seed figures (docs/model-spec.md §1), the public
// parameter counts of DeepSeek-V3.2 and Kimi-Linear-48B-A3B, a per-group count of tiny-seed written out
// from the layer formulas in this file, cache sizes from FlashMLA's and DeepSeek's formats
// (docs/deepseek.md §A.7, §B.7), and the layout rules of plan.h.
#include "moxi/model/plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "moxi/base/error.h"
#include "moxi/model/config.h"

namespace moxi::model {
namespace {

using formats::model_config;
using model::load_model_config;

std::string config_path(const std::string& name) {
  return std::string(MOXI_SOURCE_DIR) + "/configs/" + name;
}

const model_config& seed() {
  static const model_config c = load_model_config(config_path("seed-2.8t.json"));
  return c;
}
const model_config& tiny_seed() {
  static const model_config c = load_model_config(config_path("tiny-seed.json"));
  return c;
}

const plan_result& seed_plan() {
  static const plan_result r = make_plan(seed(), plan_options{});
  return r;
}

int64_t group_params(const plan_result& r, param_group g) {
  return r.groups[size_t(g)].params;
}

void expect_within(double measured, double reference, double rel, const char* what) {
  EXPECT_NEAR(measured, reference, rel * reference)
      << what << ": measured " << measured << ", reference " << reference << " (" << 100 * rel << " %)";
  std::printf("  %-34s measured %.4e  reference %.4e  (%+.2f %%)\n", what, measured, reference,
              100.0 * (measured - reference) / reference);
}

// ---- the seed model: docs/model-spec.md §1 ----

TEST(PlanTest, SeedMatchesModelMdSection1) {
  const auto& r = seed_plan();
  expect_within(double(r.total_params), 2.780e12, 0.01, "seed total params");
  expect_within(r.active_params, 104.2e9, 0.01, "seed active params");
  expect_within(double(r.disk_bytes), 1.560e12, 0.01, "seed disk bytes");
  EXPECT_EQ(r.num_shards, 96);
  // Active share ~3.7 %.
  EXPECT_NEAR(r.active_params / double(r.total_params), 0.037, 0.002);
  // Vision: the MoonViT tower with 26 blocks is the seeds' ~401 M (27 blocks, MoonViT-SO-400M's, would be
  // 417 M); the Kimi-VL projector into the 7168 text width adds LayerNorm(1152) + 4608 x 4608 + 4608 -> 7168.
  expect_within(double(r.vision_tower_params), 401e6, 0.005, "seed vision tower");
  const int64_t merged = 4 * 1152;
  EXPECT_EQ(r.vision_projector_params, 2 * 1152 + merged * merged + merged + 7168 * merged + 7168);
  EXPECT_EQ(r.vision_params, r.vision_tower_params + r.vision_projector_params);
  EXPECT_GT(r.mtp_params, 0);
  EXPECT_GT(r.checkpoint_bytes, r.disk_bytes);
  // Shards are balanced within one tensor of the mean.
  const double mean = double(r.checkpoint_bytes) / r.num_shards;
  EXPECT_LE(double(r.shard_bytes_max) - mean, double(r.largest_tensor_bytes));
  EXPECT_LE(mean - double(r.shard_bytes_min), double(r.largest_tensor_bytes));
}

TEST(PlanTest, SeedRoutedExpertsAreMxfp4) {
  const auto& r = seed_plan();
  const auto& g = r.groups[size_t(param_group::ROUTED_EXPERTS)];
  // 92 MoE layers x 896 experts x 3 x 3072 x 3584.
  const int64_t routed = 92ll * 896 * 3 * 3072 * 3584;
  EXPECT_EQ(g.params, routed);
  EXPECT_EQ(g.disk_bytes, uint64_t(routed / 2 + routed / 32));
  EXPECT_DOUBLE_EQ(g.active_params, double(routed) * 16.0 / 896.0);
  // Everything else is 2 bytes per weight, save the few F32-kept vectors.
  const auto& kda = r.groups[size_t(param_group::KDA)];
  const int64_t kda_fp32 = 69ll * (96 + 96 * 128);  // A_log + dt_bias per KDA layer
  EXPECT_EQ(kda.disk_bytes, uint64_t(2 * kda.params + 2 * kda_fp32));
}

// ---- DeepSeek-V3.2: 671 B main model, 37 B active, MTP 11.5 B unique (DeepSeek-V3 README / §E.1) ----

TEST(PlanTest, DeepSeekV32MatchesPublishedCounts) {
  const auto c = load_model_config(config_path("deepseek-v3.2.json"));
  const auto r = make_plan(c, plan_options{});
  expect_within(double(r.total_params), 671e9, 0.015, "deepseek-v3.2 total params");
  expect_within(r.active_params, 37e9, 0.03, "deepseek-v3.2 active params");
  // moxi stores the MTP layer's embed_tokens and shared_head.head shared with the main model, so its MTP
  // count is the "11.5B unique" figure, not the 14B including the two 0.93 B tables.
  expect_within(double(r.mtp_params), 11.5e9, 0.05, "deepseek-v3.2 MTP params");
  EXPECT_EQ(r.vision_params, 0);
  // "The total size of DeepSeek-V3 models on Hugging Face is 685B, which includes 671B of the Main Model
  // weights and 14B of the MTP Module weights" (DeepSeek-V3 README): main + MTP + its two vocab tables.
  const double vocab_tables = 2.0 * 129280 * 7168;
  expect_within(double(r.total_params + r.mtp_params) + vocab_tables, 685e9, 0.01, "deepseek-v3.2 HF total");
  // FP8 block-quantized: about one byte per parameter plus 4 bytes per 128x128 block of scales.
  const double bytes_per_param = double(r.disk_bytes) / double(r.total_params);
  EXPECT_GT(bytes_per_param, 1.0);
  EXPECT_LT(bytes_per_param, 1.01);
  std::printf("  deepseek-v3.2 disk %.4e bytes, checkpoint %.4e bytes\n", double(r.disk_bytes),
              double(r.checkpoint_bytes));
}

// ---- Kimi-Linear-48B-A3B: "48B total, 3B activated" (MoonshotAI/Kimi-Linear README) ----

TEST(PlanTest, KimiLinearMatchesPublishedCounts) {
  const auto c = load_model_config(config_path("kimi-linear-48b-a3b.json"));
  const auto r = make_plan(c, plan_options{});
  // "48B total" is a rounded headline. moxi's total_params is the whole text model as stored (embedding and
  // lm_head included, no MTP or vision here): 49.1 B; without the 0.38 B embedding table it would be 48.7 B.
  // Either reading is within the stated 5 %, so the comparison does not depend on that convention.
  expect_within(double(r.total_params), 48e9, 0.05, "kimi-linear total params");
  // moxi's active count (plan.cpp active_fraction) omits the embedding (a lookup, docs/model-spec.md §1) but
  // includes lm_head, attention, router, shared experts and 8/256 of the routed experts: 3.11 B. Moonshot do
  // not say which convention their "3B" uses; counting the 0.38 B embedding too would give 3.49 B, 16 % off.
  // So we compare moxi's own definition with the rounded "3B" (15 % slack), and record that this
  // definition is the one closer to the headline rather than assuming it.
  expect_within(r.active_params, 3e9, 0.15, "kimi-linear active params");
  const double emb = double(group_params(r, param_group::EMBEDDING));
  EXPECT_EQ(emb, 163840.0 * 2304.0);
  EXPECT_LT(std::abs(r.active_params - 3e9), std::abs(r.active_params + emb - 3e9));
  EXPECT_EQ(r.mtp_params, 0);
  // Unquantized: BF16 everywhere except F32-kept vectors.
  EXPECT_GT(r.disk_bytes, uint64_t(2 * r.total_params));
  EXPECT_LT(double(r.disk_bytes), 2.001 * double(r.total_params));
}

// ---- tiny-seed, counted by hand from the layer formulas ----

TEST(PlanTest, TinySeedExactCountsByGroup) {
  const auto& c = tiny_seed();
  const auto r = make_plan(c, plan_options{});

  // Sizes of tiny-seed.json, written out.
  const int64_t H = 128, V = 512, L = 6, F = 256;
  const int64_t Hk = 4, D = 16, P = Hk * D, W = 4;                                         // KDA
  const int64_t Hm = 4, QR = 48, KVR = 32, NOPE = 16, ROPE = 8, VD = 16, IH = 4, ID = 16;  // MLA + indexer
  const int64_t E = 16, K = 4, NS = 2, I = 64, LAT = 64;                                   // MoE
  const int64_t n_kda = 4, n_mla = 2, n_moe = 5, n_dense = 1;
  const int64_t vd = 64, vl = 2, vi = 128, vp = 14, vpos = 8, vm = 2;  // vision

  const int64_t kda_layer = 3 * P * H                  // q, k, v projections
                            + 3 * P * W                // depthwise convs
                            + D * H + P * D            // f_a, f_b
                            + Hk * H                   // b_proj
                            + Hk + P                   // A_log, dt_bias
                            + P * H                    // g_proj (full rank)
                            + D                        // o_norm
                            + H * P;                   // o_proj
  const int64_t mla_layer = QR * H + QR                // q_a, q_a_layernorm
                            + Hm * (NOPE + ROPE) * QR  // q_b
                            + (KVR + ROPE) * H + KVR   // kv_a, kv_a_layernorm
                            + Hm * (NOPE + VD) * KVR   // kv_b
                            + Hm * VD * H              // g_proj (output gate)
                            + H * Hm * VD              // o_proj
                            + IH * ID * QR             // indexer wq_b
                            + ID * H                   // indexer wk
                            + 2 * ID                   // indexer k_norm weight + bias
                            + IH * H;                  // indexer weights_proj
  const int64_t router = E * H + E;
  const int64_t latent = LAT * H + LAT + H * LAT;
  const int64_t routed = E * 3 * I * LAT;
  const int64_t shared = 3 * H * I * NS;
  const int64_t dense = 3 * H * F;

  EXPECT_EQ(group_params(r, param_group::EMBEDDING), V * H);
  EXPECT_EQ(group_params(r, param_group::LM_HEAD), V * H);
  EXPECT_EQ(group_params(r, param_group::NORM), H);
  EXPECT_EQ(group_params(r, param_group::LAYER_NORM), 2 * H * L);
  EXPECT_EQ(group_params(r, param_group::KDA), n_kda * kda_layer);
  EXPECT_EQ(group_params(r, param_group::MLA), n_mla * mla_layer);
  EXPECT_EQ(group_params(r, param_group::ROUTER), n_moe * router);
  EXPECT_EQ(group_params(r, param_group::LATENT_PROJ), n_moe * latent);
  EXPECT_EQ(group_params(r, param_group::ROUTED_EXPERTS), n_moe * routed);
  EXPECT_EQ(group_params(r, param_group::SHARED_EXPERTS), n_moe * shared);
  EXPECT_EQ(group_params(r, param_group::DENSE_MLP), n_dense * dense);

  const int64_t mtp = 2 * H + 2 * H * H                         // enorm, hnorm, eh_proj
                      + H + mla_layer + H                       // input/post norms + Gated DSA block
                      + router + latent + routed + shared + H;  // MoE + shared_head.norm
  EXPECT_EQ(r.mtp_params, mtp);
  EXPECT_EQ(group_params(r, param_group::MTP), mtp);

  const int64_t vision_block = 2 * 2 * vd                      // norm0, norm1 (weight + bias)
                               + 3 * vd * vd + 3 * vd          // wqkv
                               + vd * vd + vd                  // wo
                               + vi * vd + vi + vd * vi + vd;  // fc0, fc1
  const int64_t merged = vd * vm * vm;
  const int64_t tower = vd * 3 * vp * vp + vd + vpos * vpos * vd + vl * vision_block + 2 * vd;
  const int64_t projector = 2 * vd + merged * merged + merged + H * merged + H;
  const int64_t vision = tower + projector;
  EXPECT_EQ(r.vision_params, vision);
  EXPECT_EQ(r.vision_tower_params, tower);
  EXPECT_EQ(r.vision_projector_params, projector);

  const int64_t total = 2 * V * H + H + 2 * H * L + n_kda * kda_layer + n_mla * mla_layer +
                        n_moe * (router + latent + routed + shared) + n_dense * dense;
  EXPECT_EQ(r.total_params, total);
  // Active: the embedding lookup is not counted; routed experts at K/E; everything else fully.
  EXPECT_DOUBLE_EQ(r.active_params, double(total - V * H - n_moe * routed) + double(n_moe * routed) * K / E);

  // Bytes: routed experts MXFP4 (1/2 + 1/32 byte per weight), F32-kept vectors 4 bytes, the rest BF16.
  const int64_t fp32 = n_kda * (Hk + P) + n_mla * ID + n_moe * E;
  const uint64_t disk =
      uint64_t(2 * (total - n_moe * routed) + 2 * fp32) + uint64_t(n_moe * routed / 2 + n_moe * routed / 32);
  EXPECT_EQ(r.disk_bytes, disk);
  EXPECT_EQ(r.groups[size_t(param_group::ROUTED_EXPERTS)].disk_bytes,
            uint64_t(n_moe * routed / 2 + n_moe * routed / 32));
  const uint64_t mtp_bytes = uint64_t(2 * (mtp - routed) + 2 * (ID + E) + routed / 2 + routed / 32);
  EXPECT_EQ(r.checkpoint_bytes, disk + mtp_bytes + uint64_t(2 * vision));
}

// ---- caches ----

TEST(PlanTest, KdaStateIsConstantAndDsaCacheLinearInContext) {
  const auto& c = seed();
  plan_options o;
  o.context = 65536;
  const auto a = make_plan(c, o);
  o.context = 2 * 65536;
  const auto b = make_plan(c, o);
  // KDA: H x K x V fp32 state + 3 past conv inputs of q, k, v (BF16), per layer (docs/model-spec.md §3.1).
  const uint64_t kda_state = 96ull * 128 * 128 * 4 + 3ull * 3 * 96 * 128 * 2;
  EXPECT_EQ(a.kda_state_bytes_per_layer, kda_state);
  EXPECT_EQ(b.kda_state_bytes_per_layer, kda_state);
  // DSA: 512 latent + 64 rope in BF16, and the 128-dim indexer key in FP8 with an fp32 scale (132 B, as
  // DeepSeek-V3.2 caches it; docs/model-spec.md §3.2).
  const uint64_t latent = (512 + 64) * 2 + 128 + 4;
  EXPECT_EQ(a.latent_bytes_per_token_layer, latent);
  EXPECT_EQ(b.cache_bytes_per_sequence - a.cache_bytes_per_sequence, 65536ull * latent * 24);
  EXPECT_EQ(a.cache_bytes_per_sequence, 69 * kda_state + 65536ull * latent * 24);
  // Default context is the config's 1M tokens.
  EXPECT_EQ(seed_plan().context, 1048576);
  EXPECT_EQ(seed_plan().cache_bytes_per_sequence, 69 * kda_state + 1048576ull * latent * 24);
}

TEST(PlanTest, Fp8CacheUsesFlashMlaFormat) {
  plan_options o;
  o.cache = cache_format::FP8;
  // Kimi-Linear (dense MLA, no indexer): FlashMLA's 656 B = 512 e4m3 + 4 fp32 scales + 64 BF16 rope.
  const auto kimi = load_model_config(config_path("kimi-linear-48b-a3b.json"));
  EXPECT_EQ(make_plan(kimi, o).latent_bytes_per_token_layer, 656u);
  EXPECT_EQ(make_plan(kimi, plan_options{}).latent_bytes_per_token_layer, 576u * 2);
  // DSA adds the 132 B FP8 indexer key (128 e4m3 + one fp32 scale), in every cache format.
  const auto ds = load_model_config(config_path("deepseek-v3.2.json"));
  const auto fp8 = make_plan(ds, o);
  const auto bf16 = make_plan(ds, plan_options{});
  EXPECT_EQ(fp8.latent_bytes_per_token_layer, 656u + 132u);
  EXPECT_EQ(bf16.latent_bytes_per_token_layer, 576u * 2 + 132u);
  EXPECT_LT(fp8.cache_bytes_per_sequence, bf16.cache_bytes_per_sequence);
  // FlashMLA's example: 576 x 2 B x 62 layers x 128K tokens ~ 8.72 GiB (BF16 latent only); with 61 layers:
  const double latent_only = double(bf16.cache_bytes_per_sequence) * 1152.0 / 1284.0;
  const double per_128k = latent_only * 131072.0 / double(bf16.context);
  EXPECT_NEAR(per_128k / double(1ull << 30) * 62.0 / 61.0, 8.72, 0.05);
}

// ---- parallel layout ----

TEST(PlanTest, ImpossibleLayoutsAreErrors) {
  const auto& c = tiny_seed();
  auto expect_error = [&](plan_options o, const std::string& needle) {
    try {
      make_plan(c, o);
      ADD_FAILURE() << "accepted tp " << o.tp << " pp " << o.pp << " ep " << o.ep;
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  plan_options o;  // 1 node x 8 devices
  o.tp = 3;
  expect_error(o, "tp x pp");  // 3 does not divide 8
  o.tp = 16;
  expect_error(o, "tp x pp");  // larger than the machine
  o.tp = 2;
  o.pp = 3;
  expect_error(o, "tp x pp");
  o = plan_options{};
  o.ep = 3;
  expect_error(o, "--ep");  // 3 does not divide the 8 devices of a stage
  o = plan_options{};
  o.nodes = 4;
  o.ep = 32;
  expect_error(o, "--ep");  // more than the 16 experts
  o = plan_options{};
  o.tp = 0;
  expect_error(o, "--tp");
  o = plan_options{};
  o.pp = 7;
  expect_error(o, "--pp");  // more stages than the 6 layers
}

TEST(PlanTest, OneDeviceHoldsTheWholeCheckpoint) {
  const auto& c = tiny_seed();
  plan_options o;
  o.gpus_per_node = 1;
  const auto r = make_plan(c, o);
  ASSERT_EQ(r.stages.size(), 1u);
  EXPECT_EQ(r.world_size, 1);
  EXPECT_EQ(r.dp, 1);
  EXPECT_EQ(r.stages[0].first_layer, 0);
  EXPECT_EQ(r.stages[0].last_layer, 5);
  EXPECT_EQ(r.stages[0].weight_bytes, r.checkpoint_bytes);
  // Pipeline stages partition the layers and the checkpoint.
  o.gpus_per_node = 2;
  o.pp = 2;
  const auto p = make_plan(c, o);
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_EQ(p.stages[0].first_layer, 0);
  EXPECT_EQ(p.stages[1].last_layer, 5);
  EXPECT_EQ(p.stages[0].last_layer + 1, p.stages[1].first_layer);
  // ... save the embedding, which the last stage reads too for its MTP layer (model.cpp's loader).
  EXPECT_EQ(p.stages[0].weight_bytes + p.stages[1].weight_bytes,
            r.checkpoint_bytes + r.groups[size_t(param_group::EMBEDDING)].disk_bytes);
}

TEST(PlanTest, WeightsPerDeviceShrinkAsTpAndEpGrow) {
  const auto& c = seed();
  uint64_t prev = UINT64_MAX;
  for (int tp : {1, 2, 4, 8}) {
    plan_options o;
    o.tp = tp;
    const auto r = make_plan(c, o);
    EXPECT_LT(r.stages[0].weight_bytes, prev) << "tp " << tp;
    prev = r.stages[0].weight_bytes;
  }
  prev = UINT64_MAX;
  for (int ep : {1, 2, 4, 8}) {
    plan_options o;
    o.ep = ep;
    const auto r = make_plan(c, o);
    EXPECT_LT(r.stages[0].weight_bytes, prev) << "ep " << ep;
    prev = r.stages[0].weight_bytes;
  }
  // Routed experts (MXFP4) split by ep, never by tp: at ep 8 the experts' share is 1/8 of their bytes.
  plan_options o1, o8;
  o8.ep = 8;
  const auto r1 = make_plan(c, o1), r8 = make_plan(c, o8);
  const double routed = double(r1.groups[size_t(param_group::ROUTED_EXPERTS)].disk_bytes);  // main model
  EXPECT_GT(double(r1.stages[0].weight_bytes - r8.stages[0].weight_bytes), routed * 7.0 / 8.0 * 0.999);
  // 8 nodes x 8 devices as pp 8 x tp 8 with ep 8: one stage per node.
  plan_options big;
  big.nodes = 8;
  big.tp = 8;
  big.pp = 8;
  big.ep = 8;
  big.device_memory_gib = 141;
  big.context = 131072;
  const auto rb = make_plan(c, big);
  EXPECT_EQ(rb.world_size, 64);
  EXPECT_EQ(rb.dp, 1);
  EXPECT_EQ(rb.stages.size(), 8u);
  EXPECT_GT(rb.device_bytes_max, 0u);
}

TEST(PlanTest, CacheBytesPerDeviceScaleWithBatch) {
  plan_options o;
  o.context = 4096;
  const auto a = make_plan(tiny_seed(), o);
  o.batch = 4;
  const auto b = make_plan(tiny_seed(), o);
  EXPECT_EQ(a.cache_bytes_per_sequence, b.cache_bytes_per_sequence);
  EXPECT_EQ(a.stages[0].cache_bytes, a.cache_bytes_per_sequence);  // tp 1: the whole cache on each device
  EXPECT_EQ(b.stages[0].cache_bytes, 4 * a.stages[0].cache_bytes);
}

TEST(PlanTest, JsonHasTheDocumentedKeys) {
  const auto& c = tiny_seed();
  plan_options o;
  const auto r = make_plan(c, o);
  const auto j = plan_to_json(r, o);
  for (const char* key : {"total_params", "active_params", "disk_bytes", "num_shards", "mtp_params",
                          "vision_params", "checkpoint_bytes", "groups", "cache", "layout", "decode"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["total_params"].get<int64_t>(), r.total_params);
  EXPECT_EQ(j["active_params"].get<int64_t>(), int64_t(std::llround(r.active_params)));
  EXPECT_EQ(j["disk_bytes"].get<uint64_t>(), r.disk_bytes);
  EXPECT_EQ(j["num_shards"].get<int>(), r.num_shards);
  EXPECT_TRUE(j["groups"].contains("routed_experts"));
  EXPECT_TRUE(j["groups"].contains("kda"));
  EXPECT_EQ(j["groups"]["routed_experts"]["params"].get<int64_t>(),
            r.groups[size_t(param_group::ROUTED_EXPERTS)].params);
  // Empty groups are left out: tiny Kimi-Linear has no MTP, no vision and no latent MoE.
  const auto kimi = load_model_config(config_path("tiny-kimi-linear.json"));
  const auto jk = plan_to_json(make_plan(kimi, o), o);
  EXPECT_FALSE(jk["groups"].contains("mtp"));
  EXPECT_FALSE(jk["groups"].contains("vision"));
  EXPECT_FALSE(jk["groups"].contains("latent_proj"));
  EXPECT_EQ(j["cache"]["format"], "bf16");
  // The text report names the totals too.
  const std::string text = plan_to_text(c, r, o);
  EXPECT_NE(text.find("TOTAL"), std::string::npos);
  EXPECT_NE(text.find("shards"), std::string::npos);
}

// Decode traffic (plan.h, docs/plan.md): every non-expert weight once, K/E of the routed experts, one
// embedding row; caches: KDA state read and written, DSA scans every index key and reads top-k latents.
TEST(PlanTest, TinySeedDecodeTraffic) {
  const auto& c = tiny_seed();
  plan_options o;
  o.context = 1000;
  const auto r = make_plan(c, o);
  const double routed = double(r.groups[size_t(param_group::ROUTED_EXPERTS)].disk_bytes);
  const double emb = double(r.groups[size_t(param_group::EMBEDDING)].disk_bytes);
  const double weights = double(r.disk_bytes) - routed - emb + routed * 4.0 / 16.0 + 128.0 * 2;
  const double kda_state = 4.0 * 16 * 16 * 4 + 3.0 * 3 * 64 * 2;
  const double key = 16 + 4, latent = (32 + 8) * 2;  // the FP8 index key: 16 codes and an fp32 scale
  const double cache = 2.0 * 4 * kda_state + 2.0 * (1000 * key + 8 * latent);  // top-k 8 of 1000 positions
  EXPECT_NEAR(r.bytes_per_token_batch1, weights + cache, 1e-6 * (weights + cache));
  EXPECT_NEAR(r.weight_bytes_per_token_batch, weights, 1e-6 * weights);
  // Larger batches share expert reads: bytes per token fall, but never below the non-expert share.
  o.batch = 64;
  const auto b = make_plan(c, o);
  EXPECT_LT(b.weight_bytes_per_token_batch, r.weight_bytes_per_token_batch);
  EXPECT_GT(b.weight_bytes_per_token_batch, (double(r.disk_bytes) - routed - emb) / 64.0);
}

TEST(PlanTest, EveryShippedConfigPlansAndReports) {
  for (const char* cfg : {"tiny-seed.json", "tiny-kimi-linear.json", "tiny-deepseek-v3.2.json",
                          "kimi-linear-48b-a3b.json", "deepseek-v3.2.json"}) {
    SCOPED_TRACE(cfg);
    const auto c = load_model_config(config_path(cfg));
    for (auto fmt : {cache_format::BF16, cache_format::FP8}) {
      plan_options o;
      o.cache = fmt;
      const auto r = make_plan(c, o);
      EXPECT_GT(r.total_params, 0);
      EXPECT_GT(r.active_params, 0);
      EXPECT_LT(r.active_params, double(r.total_params));
      EXPECT_FALSE(plan_to_text(c, r, o).empty());
      EXPECT_EQ(plan_to_json(r, o)["total_params"].get<int64_t>(), r.total_params);
    }
  }
}

TEST(PlanTest, ShardCountClampsToTheTensorCount) {
  plan_options o;
  o.num_shards = 1'000'000;
  const auto r = make_plan(tiny_seed(), o);
  EXPECT_EQ(r.num_shards, r.num_tensors);
  o.num_shards = 3;
  EXPECT_EQ(make_plan(tiny_seed(), o).num_shards, 3);
}

}  // namespace
}  // namespace moxi::model
