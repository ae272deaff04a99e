// `moxi plan`'s communication figures and bytes read at load (plan.h, docs/plan.md "Communication",
// "Bytes read at load") against independent references written here: the expected number of remote expert
// ranks by enumerating every k-subset of a small expert set, per-stage all-reduce / all-to-all / send /
// logits bytes and their times from the fp64 formulas of docs/plan.md evaluated by hand for tiny-seed, and
// the bytes one rank loads summed tensor by tensor from tiny-seed's layer shapes (as plan-test.cpp counts
// its parameters).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/model/config.h"
#include "moxi/model/plan.h"

namespace moxi::model {
namespace {

// A cluster of `nodes` x `gpus` devices and a tp x pp x ep layout; the other options at their defaults.
plan_options layout(int nodes, int gpus, int tp, int pp, int ep) {
  plan_options o;
  o.nodes = nodes;
  o.gpus_per_node = gpus;
  o.tp = tp;
  o.pp = pp;
  o.ep = ep;
  return o;
}

using formats::model_config;

model_config load(const std::string& name) {
  return load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/" + name);
}

// Owner of expert e: ep contiguous blocks, the first E % ep of them one expert larger (written out apart
// from plan.cpp: walk the blocks).
int owner(int E, int ep, int e) {
  int start = 0;
  for (int j = 0; j < ep; ++j) {
    const int n = E / ep + (j < E % ep ? 1 : 0);
    if (e < start + n) return j;
    start += n;
  }
  return -1;
}

struct remote_counts {
  double all = 0, other_node = 0;
};

// Mean over every k-subset of E experts (uniform routing) and every home rank of the group of the
// distinct ranks other than the home that hold one of the subset's experts; `node_of[j]` places rank j.
remote_counts brute_force(int E, int k, int ep, const std::vector<int>& node_of) {
  remote_counts sum;
  int64_t subsets = 0;
  for (uint32_t mask = 0; mask < (1u << E); ++mask) {
    if (std::popcount(mask) != k) continue;
    ++subsets;
    std::vector<bool> hit(size_t(ep), false);
    for (int e = 0; e < E; ++e)
      if (mask >> e & 1u) hit[size_t(owner(E, ep, e))] = true;
    for (int home = 0; home < ep; ++home)
      for (int j = 0; j < ep; ++j)
        if (j != home && hit[size_t(j)]) {
          sum.all += 1;
          if (node_of[size_t(j)] != node_of[size_t(home)]) sum.other_node += 1;
        }
  }
  const double n = double(subsets) * ep;
  return {sum.all / n, sum.other_node / n};
}

TEST(PlanCommTest, ExpectedRemoteRanksMatchEnumeration) {
  struct tc {
    int E, k, ep;
  };
  for (const tc t : {tc{8, 3, 4}, tc{7, 3, 3}, tc{12, 4, 6}, tc{10, 2, 4}, tc{16, 4, 4}, tc{9, 9, 3}, tc{6, 1, 6}}) {
    SCOPED_TRACE("E " + std::to_string(t.E) + " k " + std::to_string(t.k) + " ep " + std::to_string(t.ep));
    const auto ref = brute_force(t.E, t.k, t.ep, std::vector<int>(size_t(t.ep), 0));
    EXPECT_NEAR(expected_remote_ranks(t.E, t.k, t.ep), ref.all, 1e-12);
  }
  EXPECT_EQ(expected_remote_ranks(16, 4, 1), 0.0);
}

// The planner's figure for whole layouts, even and uneven expert splits, and its split across nodes.
TEST(PlanCommTest, PlanRemoteRanksMatchEnumerationWithPlacement) {
  auto c = load("tiny-seed.json");  // 16 experts, 4 per token
  ASSERT_EQ(c.moe.num_experts, 16);
  ASSERT_EQ(c.moe.experts_per_token, 4);
  {
    plan_options o;  // one node of 4 devices, ep 4: no rank on another node
    o.gpus_per_node = 4;
    o.ep = 4;
    const auto r = make_plan(c, o);
    const auto ref = brute_force(16, 4, 4, {0, 0, 0, 0});
    EXPECT_NEAR(r.expected_remote_ranks, ref.all, 1e-12);
    EXPECT_EQ(r.expected_remote_ranks_inter, 0.0);
  }
  {
    plan_options o;  // 2 nodes of 2 devices: ranks 0, 1 on node 0, ranks 2, 3 on node 1
    o.nodes = 2;
    o.gpus_per_node = 2;
    o.ep = 4;
    const auto r = make_plan(c, o);
    const auto ref = brute_force(16, 4, 4, {0, 0, 1, 1});
    EXPECT_NEAR(r.expected_remote_ranks, ref.all, 1e-12);
    EXPECT_NEAR(r.expected_remote_ranks_inter, ref.other_node, 1e-12);
    EXPECT_GT(r.expected_remote_ranks_inter, 0.0);
  }
  {
    c.moe.num_experts = 12;  // 12 experts over 8 ranks: 2, 2, 2, 2, 1, 1, 1, 1
    plan_options o;
    o.ep = 8;
    o.nodes = 2;
    o.gpus_per_node = 4;
    o.pp = 1;
    const auto r = make_plan(c, o);
    const auto ref = brute_force(12, 4, 8, {0, 0, 0, 0, 1, 1, 1, 1});
    EXPECT_NEAR(r.expected_remote_ranks, ref.all, 1e-12);
    EXPECT_NEAR(r.expected_remote_ranks_inter, ref.other_node, 1e-12);
  }
}

// tiny-seed: hidden 128, vocab 512, 6 layers of which 5 MoE (the first is dense), latent experts of width
// 64. Layout: 2 nodes x 4 devices, tp 2, pp 2 (dp 2), ep 2. Stage 0 = ranks 0-3 (node 0), layers 0-2 (MoE
// layers 1, 2); stage 1 = ranks 4-7 (node 1), layers 3-5 (3 MoE layers). EP groups {0,1}, {2,3}, ... stay
// inside a node; the stage 0 -> 1 send and the logits broadcast cross nodes.
TEST(PlanCommTest, TinySeedBytesAndTimesByHand) {
  const auto c = load("tiny-seed.json");
  plan_options o = layout(2, 4, 2, 2, 2);
  o.link_gbps = 100;        // 12.5e9 B/s
  o.intra_node_gbps = 800;  // 100e9 B/s
  const auto r = make_plan(c, o);
  ASSERT_EQ(r.comm.size(), 2u);
  const double H = 128, V = 512, W = 64, act = 2, tp = 2;
  const double inter = 12.5e9, intra = 100e9;
  // A token's 4 of 16 experts miss one 8-expert rank with probability C(8,4)/C(16,4) = 70/1820.
  const double p = 1.0 - 70.0 / 1820.0;
  const double R = 0.5 * (p + p);  // ((ep - 1) / ep) * sum of both ranks' hit probabilities
  EXPECT_NEAR(r.expected_remote_ranks, R, 1e-12);
  EXPECT_EQ(r.dispatch_bytes_per_token, int64_t(W * act));

  const auto& s0 = r.comm[0];
  const auto& s1 = r.comm[1];
  EXPECT_EQ(s0.layers, 3);
  EXPECT_EQ(s0.moe_layers, 2);
  EXPECT_EQ(s1.layers, 3);
  EXPECT_EQ(s1.moe_layers, 3);
  // Two ring all-reduces of the hidden state per layer, 2 (tp - 1) / tp of it each.
  const double ar = 3 * 2 * (2 * (tp - 1) / tp) * H * act;
  EXPECT_DOUBLE_EQ(s0.allreduce_bytes, ar);
  EXPECT_DOUBLE_EQ(s1.allreduce_bytes, ar);
  EXPECT_FALSE(s0.tp_inter_node);
  // Dispatch + combine: 2 vectors of W x 2 bytes per remote rank and MoE layer, the token dispatched by one
  // of its replica's tp ranks.
  const double a2a0 = 2 * 2 * R * W * act / tp, a2a1 = 3 * 2 * R * W * act / tp;
  EXPECT_NEAR(s0.alltoall_bytes, a2a0, 1e-9);
  EXPECT_NEAR(s1.alltoall_bytes, a2a1, 1e-9);
  EXPECT_EQ(s0.alltoall_bytes_inter, 0.0);
  EXPECT_DOUBLE_EQ(s0.pp_send_bytes, H * act);
  EXPECT_TRUE(s0.pp_inter_node);
  EXPECT_EQ(s1.pp_send_bytes, 0.0);
  EXPECT_EQ(s0.logits_bytes, 0.0);
  EXPECT_DOUBLE_EQ(s1.logits_bytes, V * 4);  // broadcast from the last stage's first rank to all
  // The indexer's split scan (stage 1 holds both DSA layers): past k * tp = 16 visible keys, each rank sends
  // its 8 candidates of 8 bytes to the other rank; a 4096-token prompt's first 16 positions do not split.
  EXPECT_EQ(s0.indexer_decode_bytes, 0.0);
  const double idx = 2 * (tp - 1) * 8 * 8, idx_prefill = idx * (4096 - 16) / 4096;
  EXPECT_DOUBLE_EQ(s1.indexer_decode_bytes, idx);
  EXPECT_DOUBLE_EQ(s1.indexer_prefill_bytes, idx_prefill);
  // Times: each collective at the bandwidth of the links it uses.
  const double t0 = ar / intra + a2a0 / intra + H * act / inter;
  const double t1 = ar / intra + a2a1 / intra + idx_prefill / intra;
  const double t1_decode = ar / intra + a2a1 / intra + idx / intra + V * 4 / inter;  // the world spans both nodes
  EXPECT_NEAR(s0.prefill_seconds, t0, 1e-18);
  EXPECT_NEAR(s0.decode_seconds, t0, 1e-18);
  EXPECT_NEAR(s1.prefill_seconds, t1, 1e-18);
  EXPECT_NEAR(s1.decode_seconds, t1_decode, 1e-18);
  EXPECT_NEAR(r.decode_comm_seconds, t0 + t1_decode, 1e-18);
  EXPECT_NEAR(r.prefill_comm_seconds, std::max(t0, t1), 1e-18);
  EXPECT_NEAR(r.decode_comm_bytes_per_rank, std::max(ar + a2a0 + H * act, ar + a2a1 + idx + V * 4), 1e-9);
  EXPECT_NEAR(r.prefill_comm_bytes_per_rank, std::max(ar + a2a0 + H * act, ar + a2a1 + idx_prefill), 1e-9);
}

// One device per node: every collective leaves the node.
TEST(PlanCommTest, OneDevicePerNodeCostsEverythingAtTheLinkSpeed) {
  const auto c = load("tiny-seed.json");
  plan_options o = layout(8, 1, 2, 2, 4);
  const auto r = make_plan(c, o);
  const double link = 400e9 / 8;
  for (const auto& s : r.comm) {
    EXPECT_TRUE(s.tp_inter_node);
    EXPECT_NEAR(s.alltoall_bytes_inter, s.alltoall_bytes, 1e-9);
    const double t = (s.allreduce_bytes + s.alltoall_bytes + s.pp_send_bytes + s.indexer_prefill_bytes) / link;
    EXPECT_NEAR(s.prefill_seconds, t, 1e-15);
  }
  EXPECT_TRUE(r.comm[0].pp_inter_node);
  EXPECT_NEAR(r.expected_remote_ranks_inter, r.expected_remote_ranks, 1e-12);
  // Without parallelism there is nothing to send.
  plan_options one;
  one.gpus_per_node = 1;
  const auto r1 = make_plan(c, one);
  EXPECT_EQ(r1.decode_comm_bytes_per_rank, 0.0);
  EXPECT_EQ(r1.decode_comm_seconds, 0.0);
}

// The seed at tp 8 x dp 8 on 8 nodes of 8, ep 64 (one EP group over all 64 devices).
TEST(PlanCommTest, SeedFiguresFromTheFormulas) {
  const auto c = load("seed-2.8t.json");
  plan_options o;
  o.nodes = 8;
  o.tp = 8;
  o.ep = 64;
  o.context = 131072;
  const auto r = make_plan(c, o);
  double none = 1;  // C(896 - 14, 16) / C(896, 16)
  for (int i = 0; i < 16; ++i) none *= double(882 - i) / double(896 - i);
  const double p = 1 - none;
  EXPECT_NEAR(r.expected_remote_ranks, 63 * p, 1e-9);
  EXPECT_NEAR(r.expected_remote_ranks_inter, 56 * p, 1e-9);  // 7 of the 63 share the home's node
  const auto& s = r.comm[0];
  EXPECT_DOUBLE_EQ(s.allreduce_bytes, 2.0 * 93 * 2 * 7.0 / 8 * 7168 * 2);
  EXPECT_NEAR(s.alltoall_bytes, 92 * 2 * 63 * p * 3584 * 2 / 8.0, 1e-6);
  EXPECT_NEAR(s.alltoall_bytes_inter, 92 * 2 * 56 * p * 3584 * 2 / 8.0, 1e-6);
  EXPECT_DOUBLE_EQ(s.logits_bytes, 163840.0 * 4);
  const double per_remote = 92 * 2 * 3584 * 2 / 8.0;
  const double a2a_time = std::max(7 * p * per_remote / 450e9, 56 * p * per_remote / 50e9);
  // 24 Gated DSA layers; each rank's 2048 index candidates of 8 bytes to 7 others, from position 16384 on.
  const double idx = 24 * 7 * 2048 * 8.0;
  EXPECT_DOUBLE_EQ(s.indexer_decode_bytes, idx);
  EXPECT_DOUBLE_EQ(s.indexer_prefill_bytes, idx * (131072 - 16384) / 131072.0);
  EXPECT_NEAR(s.prefill_seconds, (s.allreduce_bytes + s.indexer_prefill_bytes) / 450e9 + a2a_time, 1e-15);
  std::printf("  seed tp8 ep64 8x8: %.2f remote ranks (%.2f off node), %.3f MB/token/rank decode, %.1f us\n",
              r.expected_remote_ranks, r.expected_remote_ranks_inter, r.decode_comm_bytes_per_rank / 1e6,
              r.decode_comm_seconds * 1e6);
}

// ---- bytes read at load ----

// tiny-seed at tp 2, ep 1, pp 1: every tensor written out with whether a rank reads it whole (R) or half
// (S, split by heads / intermediate width), in stored bytes (BF16, F32-kept vectors, MXFP4
// routed experts).
TEST(PlanCommTest, TinySeedLoadBytesByHand) {
  const auto c = load("tiny-seed.json");
  const int64_t H = 128, V = 512, L = 6, F = 256;
  const int64_t Hk = 4, D = 16, P = Hk * D, W = 4;
  const int64_t Hm = 4, QR = 48, KVR = 32, NOPE = 16, ROPE = 8, VD = 16, IH = 4, ID = 16;
  const int64_t E = 16, NS = 2, I = 64, LAT = 64;
  const int64_t n_kda = 4, n_mla = 2, n_moe = 5, n_dense = 1;
  const int64_t vd = 64, vl = 2, vi = 128, vp = 14, vpos = 8, vm = 2;
  const int64_t bf = 2, f32 = 4;

  // KDA layer: sliced q, k, v, their convs, f_b, b_proj, A_log (F32), dt_bias (F32), g_proj, o_proj;
  // whole f_a and o_norm.
  const int64_t kda_S = bf * (3 * P * H + 3 * P * W + P * D + Hk * H + P * H + H * P) + f32 * (Hk + P);
  const int64_t kda_R = bf * (D * H + D);
  // MLA layer: sliced q_b, kv_b, g_proj, o_proj; whole q_a (+ norm), kv_a (+ norm) and the indexer.
  const int64_t mla_S = bf * (Hm * (NOPE + ROPE) * QR + Hm * (NOPE + VD) * KVR + Hm * VD * H + H * Hm * VD);
  const int64_t mla_R = bf * (QR * H + QR + (KVR + ROPE) * H + KVR + IH * ID * QR + ID * H + ID + IH * H) + f32 * ID;
  // MoE layer: whole router (F32 bias) and latent projections, MXFP4 routed experts (ep 1: all), sliced
  // shared experts.
  const int64_t routed = E * 3 * I * LAT;
  const int64_t moe_R = bf * (E * H + LAT * H + LAT + H * LAT) + f32 * E + routed / 2 + routed / 32;
  const int64_t shared_S = bf * 3 * H * I * NS;
  const int64_t dense_S = bf * 3 * H * F;
  // Vision (whole), on the first stage.
  const int64_t vision_block = 2 * 2 * vd + 3 * vd * vd + 3 * vd + vd * vd + vd + vi * vd + vi + vd * vi + vd;
  const int64_t merged = vd * vm * vm;
  const int64_t vision = vd * 3 * vp * vp + vd + vpos * vpos * vd + vl * vision_block + 2 * vd + 2 * vd +
                         merged * merged + merged + H * merged + H;
  // MTP layer (last stage): whole enorm, hnorm, eh_proj, its two layer norms and shared_head.norm; a Gated
  // DSA block, a MoE block and shared experts as above.
  const int64_t mtp_R = bf * (2 * H + 2 * H * H + 2 * H + H) + mla_R + moe_R;
  const int64_t mtp_S = mla_S + shared_S;

  const int64_t whole = bf * V * H /*embedding*/ + bf * V * H /*lm_head*/ + bf * H /*final norm*/ + bf * 2 * H * L + n_kda * kda_R +
                        n_mla * mla_R + n_moe * moe_R + bf * vision + mtp_R;
  const int64_t split = n_kda * kda_S + n_mla * mla_S + n_moe * shared_S +
                        n_dense * dense_S + mtp_S;
  ASSERT_EQ(split % 2, 0);
  EXPECT_EQ(rank_load_bytes(c, 2, 1, 1, 0), uint64_t(whole + split / 2));
  EXPECT_EQ(rank_load_bytes(c, 2, 1, 1, 1), uint64_t(whole + split / 2));
  // tp 1: the whole checkpoint.
  const auto full = make_plan(c, [] {
    plan_options o;
    o.gpus_per_node = 1;
    return o;
  }());
  EXPECT_EQ(rank_load_bytes(c, 1, 1, 1, 0), full.checkpoint_bytes);
  EXPECT_EQ(uint64_t(whole + split), full.checkpoint_bytes);  // the hand list covers every tensor
}

// Routed experts split by ep: the ranks of an EP group read disjoint expert blocks, everything else alike;
// pipeline stages partition the rest. The plan's per-rank figures are rank_load_bytes.
TEST(PlanCommTest, LoadBytesPartitionExpertsAndLayers) {
  const auto c = load("tiny-seed.json");
  plan_options one;
  one.gpus_per_node = 1;
  const auto full = make_plan(c, one);
  const uint64_t experts = full.groups[size_t(param_group::ROUTED_EXPERTS)].disk_bytes;
  // MTP's routed experts: 16 x 3 x 64 x 64 in MXFP4.
  const uint64_t mtp_experts = uint64_t(16 * 3 * 64 * 64) / 2 + uint64_t(16 * 3 * 64 * 64) / 32;
  const uint64_t all_experts = experts + mtp_experts;
  for (int ep : {2, 4, 8, 16}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    uint64_t sum = 0;
    for (int r = 0; r < ep; ++r) sum += rank_load_bytes(c, 1, ep, 1, r);
    EXPECT_EQ(sum, full.checkpoint_bytes + uint64_t(ep - 1) * (full.checkpoint_bytes - all_experts));
    // 16 experts over ep ranks evenly: every rank reads the same.
    EXPECT_EQ(rank_load_bytes(c, 1, ep, 1, 0), rank_load_bytes(c, 1, ep, 1, ep - 1));
  }
  // 16 experts over 3 ranks (6, 5, 5), a world of 3: rank 0 reads one expert per MoE layer (and MTP) more.
  const uint64_t one_expert = all_experts / 16 / 6 * 1;  // 6 MoE blocks (5 layers + MTP), per expert
  EXPECT_EQ(rank_load_bytes(c, 1, 3, 1, 0, 3) - rank_load_bytes(c, 1, 3, 1, 1, 3), one_expert * 6);
  // pp 2, tp 1, ep 1: the two stages' ranks read the checkpoint once together, the embedding twice (the
  // last stage's MTP layer uses it).
  const uint64_t embedding = full.groups[size_t(param_group::EMBEDDING)].disk_bytes;
  EXPECT_EQ(rank_load_bytes(c, 1, 1, 2, 0) + rank_load_bytes(c, 1, 1, 2, 1), full.checkpoint_bytes + embedding);
  // The plan reports rank_load_bytes per rank, and the heaviest rank of a stage as its weights.
  plan_options o = layout(2, 4, 2, 2, 4);
  const auto r = make_plan(c, o);
  ASSERT_EQ(r.load_bytes_per_rank.size(), 8u);
  uint64_t total = 0;
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(r.load_bytes_per_rank[size_t(rank)], rank_load_bytes(c, 2, 4, 2, rank, 8)) << rank;
    total += r.load_bytes_per_rank[size_t(rank)];
  }
  EXPECT_EQ(r.load_bytes_total, total);
  for (size_t s = 0; s < 2; ++s) {
    const auto b = r.load_bytes_per_rank.begin() + std::ptrdiff_t(4 * s);
    EXPECT_EQ(r.stages[s].weight_bytes, *std::max_element(b, b + 4));
    EXPECT_EQ(r.comm[s].load_bytes_min, *std::min_element(b, b + 4));
  }
  // Placement: rank = (stage * dp + replica) * tp + tp_index; EP groups of ep consecutive ranks of a stage.
  const auto rc = rank_position(2, 4, 2, 8, 6);
  EXPECT_EQ(rc.stage, 1);
  EXPECT_EQ(rc.replica, 1);
  EXPECT_EQ(rc.tp_index, 0);
  EXPECT_EQ(rc.ep_group, 0);
  EXPECT_EQ(rc.ep_index, 2);
  EXPECT_THROW(rank_position(2, 4, 2, 8, 8), moxi::error);
  EXPECT_THROW(rank_load_bytes(c, 2, 3, 1, 0, 4), moxi::error);  // ep 3 does not divide a stage of 4
}

}  // namespace
}  // namespace moxi::model
