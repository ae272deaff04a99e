// hybrid_memory and its prefix cache: sizing from a config, hash-chain hits (same prefix -> same blocks,
// a changed block ends the hit), hits only up to a KDA snapshot, bit-exact snapshot restore, LRU eviction
// of unreferenced blocks only, fork copy-on-write, and counts back to baseline.
#include "moxi/memory/hybrid-memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <numeric>
#include <random>

#include "moxi/formats/model-config.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/model/config.h"

namespace moxi::memory {
namespace {

using formats::attn_kind;

cache_spec hybrid_spec() {
  cache_spec s;
  s.layers = {attn_kind::KDA, attn_kind::MLA, attn_kind::KDA, attn_kind::MLA};
  s.latent_width = 6;
  s.index_width = 2;
  s.kda_heads = 2;
  s.kda_head_dim = 3;
  s.kda_conv_kernel = 3;
  return s;
}

// KDA, sliding-window and MLA layers; and sliding-window layers as the only state.
cache_spec swa_hybrid_spec() {
  cache_spec s = hybrid_spec();
  s.layers = {attn_kind::KDA, attn_kind::SWA, attn_kind::MLA, attn_kind::SWA};
  s.swa_window = 5;
  s.swa_kv_dim = 3;
  return s;
}

cache_spec swa_mla_spec() {
  cache_spec s = swa_hybrid_spec();
  s.layers = {attn_kind::SWA, attn_kind::MLA};
  return s;
}

cache_spec mla_spec() {
  cache_spec s = hybrid_spec();
  s.layers = {attn_kind::MLA, attn_kind::MLA};
  return s;
}

memory_options opts(int32_t blocks, int32_t slots = 4, int32_t snapshots = 8, int32_t block_size = 4) {
  memory_options o;
  o.block_size = block_size;
  o.num_blocks = blocks;
  o.num_state_slots = slots;
  o.num_snapshot_slots = snapshots;
  return o;
}

std::vector<token_id> iota_tokens(int n, int start = 0) {
  std::vector<token_id> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

// What an executor does for n tokens: rows derived from the position into every MLA layer, and a KDA
// state that depends on everything fed so far.
void fake_forward(hybrid_memory& m, seq_id s, std::span<const token_id> tokens, int64_t n) {
  const auto& spec = m.spec();
  const int64_t pos = m.length(s);
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    if (!spec.holds(l)) continue;  // another pipeline stage's layer
    if (spec.layers[l] == attn_kind::MLA) {
      std::vector<float> lat(size_t(n * spec.latent_width)), idx(size_t(n * spec.index_width));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < spec.latent_width; ++j)
          lat[size_t(i * spec.latent_width + j)] = float(tokens[size_t(pos + i)]) + 0.01f * float(j + l);
        for (int64_t j = 0; j < spec.index_width; ++j)
          idx[size_t(i * spec.index_width + j)] = -float(tokens[size_t(pos + i)]) - 0.1f * float(j);
      }
      m.write_latents(s, int64_t(l), pos, n, lat.data(), idx.data());
    } else if (spec.layers[l] == attn_kind::SWA) {
      // A ring: position p's row (p % window) holds values of token p and p.
      float* ring = m.state(s, int64_t(l));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t p = pos + i, row = p % spec.swa_window;
        for (int64_t j = 0; j < spec.swa_kv_dim; ++j) {
          ring[row * spec.swa_kv_dim + j] = float(tokens[size_t(p)]) + 0.5f * float(j);
          ring[(spec.swa_window + row) * spec.swa_kv_dim + j] = float(p) - float(j);
        }
      }
    } else {
      auto st = m.kda(s, int64_t(l));
      for (int64_t i = 0; i < n; ++i) {
        const float x = float(tokens[size_t(pos + i)]);
        for (int64_t j = 0; j < spec.recurrent_floats(); ++j)
          st.recurrent[j] = st.recurrent[j] * 0.75f + x * float(j + 1) * 0.001f;
        for (int64_t j = 0; j < spec.conv_floats(); ++j) st.conv_q[j] = st.conv_q[j] * 0.5f + x;
        for (int64_t j = 0; j < spec.conv_floats(); ++j) st.conv_k[j] = st.conv_k[j] * 0.25f - x;
        for (int64_t j = 0; j < spec.conv_floats(); ++j) st.conv_v[j] = st.conv_v[j] + x * 0.125f;
      }
    }
  }
}

// Computes tokens [length, length+n) of s and commits them.
void step(hybrid_memory& m, seq_id s, std::span<const token_id> tokens, int64_t n) {
  ASSERT_TRUE(m.reserve(s, n));
  fake_forward(m, s, tokens, n);
  m.commit(s, tokens, n);
  m.check_invariants();
}

std::vector<float> state_bytes(const hybrid_memory& m, seq_id s) {
  const auto& slots = m.state_slots();
  const float* p = slots.data(m.state_slot(s));
  return std::vector<float>(p, p + slots.slot_floats());
}

void expect_baseline(const hybrid_memory& m) {
  const auto st = m.stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
  EXPECT_EQ(st.free_state_slots, st.num_state_slots);
  EXPECT_EQ(st.live_sequences, 0);
  m.check_invariants();
}

TEST(CacheSpec, FromTheTinyKimiLinearConfig) {
  const auto c = model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-kimi-linear.json");
  const auto s = cache_spec::from_config(c);
  ASSERT_EQ(s.layers.size(), size_t(c.num_layers + c.num_mtp_layers));
  EXPECT_EQ(s.num_kda_layers(), c.num_kda_layers());
  EXPECT_EQ(s.num_mla_layers(), c.num_mla_layers());
  EXPECT_EQ(s.latent_width, c.mla->kv_lora_rank + c.mla->qk_rope_head_dim);
  EXPECT_EQ(s.index_width, 0);  // no DSA
  EXPECT_EQ(s.conv_floats(), (c.kda->conv_kernel - 1) * c.kda->num_heads * c.kda->head_dim);
  EXPECT_EQ(s.bytes_per_state_slot(),
            size_t(s.num_kda_layers() * (3 * s.conv_floats() + s.recurrent_floats())) * sizeof(float));
  EXPECT_EQ(s.bytes_per_block(16), size_t(s.num_mla_layers() * 16 * s.latent_width) * sizeof(float));
}

TEST(CacheSpec, FromTheTinyHybridSwaConfig) {
  const auto c = model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-hybrid-swa.json");
  const auto s = cache_spec::from_config(c);
  ASSERT_EQ(s.layers.size(), size_t(c.num_layers + c.num_mtp_layers));
  EXPECT_EQ(s.num_swa_layers(), 2);
  EXPECT_EQ(s.num_kda_layers(), 2);
  EXPECT_EQ(s.num_mla_layers(), 3);  // 2 + the MTP layer
  EXPECT_EQ(s.num_state_layers(), 4);
  EXPECT_EQ(s.num_paged_layers(), 3);
  // The FP8 index key row as 4-byte words: 16 E4M3 codes, then the fp32 scale (kernels/ref/dsa.h).
  ASSERT_EQ(c.dsa->index_head_dim, 16);
  EXPECT_EQ(s.index_width, 5);
  EXPECT_EQ(s.index_width * 4, moxi::kernels::ref::index_key_bytes(c.dsa->index_head_dim));
  // The ring: window rows of keys and of values, KV heads x head_dim floats each.
  EXPECT_EQ(s.state_floats(attn_kind::SWA), 2 * c.swa->window * c.swa->num_kv_heads * c.swa->head_dim);
  EXPECT_EQ(s.bytes_per_state_slot(), size_t(2 * (3 * s.conv_floats() + s.recurrent_floats()) +
                                             2 * 2 * c.swa->window * c.swa->num_kv_heads * c.swa->head_dim) *
                                          sizeof(float));
  EXPECT_EQ(s.bytes_per_block(16), size_t(3 * 16 * s.token_floats()) * sizeof(float));
}

TEST(PrefixCache, SlidingWindowRingIsSnapshottedAndRestoredBitExactly) {
  for (const auto& spec : {swa_hybrid_spec(), swa_mla_spec()}) {
    SCOPED_TRACE(spec.layers.size());
    hybrid_memory m(spec, opts(32));
    // A ring is a state: without an exact snapshot no prefix may be reused, so steps end on blocks.
    EXPECT_TRUE(m.wants_block_aligned_steps());
    std::mt19937 rng(9);
    std::vector<token_id> a(23);
    for (auto& t : a) t = token_id(rng() % 1000);
    const seq_id s = m.admit(m.find_prefix(a), 0);
    step(m, s, a, 4);
    step(m, s, a, 8);  // 12: two block boundaries crossed, a snapshot at 12
    const auto at12 = state_bytes(m, s);
    step(m, s, a, 9);  // 21: the ring has wrapped past what it held at 12
    ASSERT_NE(state_bytes(m, s), at12);
    m.free(s);

    auto b = a;
    b.resize(13);
    const auto hit = m.find_prefix(b);
    ASSERT_EQ(hit.num_tokens, 12);
    const seq_id t = m.admit(hit, 1);
    EXPECT_EQ(state_bytes(m, t), at12);
    // Equal to computing the 12 tokens from scratch one by one (the ring wraps differently per step).
    hybrid_memory fresh(spec, opts(32, 4, 0));
    EXPECT_EQ(fresh.find_prefix(a).num_tokens, 0);  // no snapshots: no reuse
    const seq_id u = fresh.admit(fresh.find_prefix(a), 0);
    for (int i = 0; i < 12; ++i) step(fresh, u, a, 1);
    EXPECT_EQ(state_bytes(fresh, u), at12);
    // A fork copies the ring.
    const auto f = m.fork(t);
    ASSERT_TRUE(f);
    EXPECT_EQ(state_bytes(m, *f), state_bytes(m, t));
    m.free(*f);
    fresh.free(u);
    m.free(t);
    expect_baseline(m);
  }
}

TEST(PrefixCache, SamePrefixSameBlocksDifferentSuffixDiverges) {
  hybrid_memory m(mla_spec(), opts(32));
  const auto a = iota_tokens(14);  // 3 full blocks of 4 + 2
  const seq_id s = m.admit(m.find_prefix(a), 0);
  step(m, s, a, 14);
  const auto table = std::vector<block_id>(m.block_table(s).begin(), m.block_table(s).end());

  auto hit = m.find_prefix(a);
  EXPECT_EQ(hit.num_tokens, 12);
  EXPECT_EQ(hit.blocks, std::vector<block_id>(table.begin(), table.begin() + 3));
  // Exactly 12 tokens: the whole prompt cached, but the last token is left to compute.
  EXPECT_EQ(m.find_prefix(iota_tokens(12)).num_tokens, 8);
  EXPECT_EQ(m.find_prefix(iota_tokens(13)).num_tokens, 12);

  auto b = a;
  b[9] = 999;  // inside block 2
  hit = m.find_prefix(b);
  EXPECT_EQ(hit.num_tokens, 8);
  EXPECT_EQ(hit.blocks, std::vector<block_id>(table.begin(), table.begin() + 2));
  auto c = a;
  c[0] = 999;  // the first block changes every hash after it
  EXPECT_EQ(m.find_prefix(c).num_tokens, 0);

  // A hit shares the blocks and reads the same rows as the sequence that wrote them.
  const seq_id t = m.admit(m.find_prefix(b), 6);
  EXPECT_EQ(m.length(t), 8);
  EXPECT_EQ(m.blocks().ref_count(table[0]), 2);
  std::vector<float> ra(8 * 6), rb(8 * 6);
  m.read_latents(s, 1, 0, 8, ra.data(), nullptr);
  m.read_latents(t, 1, 0, 8, rb.data(), nullptr);
  EXPECT_EQ(ra, rb);
  fake_forward(m, t, b, 6);
  m.commit(t, b, 6);
  m.free(s);
  m.free(t);
  expect_baseline(m);
}

TEST(PrefixCache, PrefixCachingOffNeverHits) {
  auto o = opts(32);
  o.prefix_caching = false;
  hybrid_memory m(mla_spec(), o);
  const auto a = iota_tokens(14);
  const seq_id s = m.admit(m.find_prefix(a), 0);
  step(m, s, a, 14);
  EXPECT_EQ(m.find_prefix(a).num_tokens, 0);
  EXPECT_EQ(m.stats().cached_blocks, 0);
  m.free(s);
  expect_baseline(m);
}

TEST(PrefixCache, KdaHitEndsAtTheLastSnapshot) {
  hybrid_memory m(hybrid_spec(), opts(32));
  ASSERT_TRUE(m.wants_block_aligned_steps());
  const auto a = iota_tokens(20);
  const seq_id s = m.admit(m.find_prefix(a), 0);
  step(m, s, a, 8);  // ends on the boundary after block 1: snapshot
  step(m, s, a, 5);  // ends at 13: block 2 is full and cached but has no state
  EXPECT_EQ(m.stats().used_snapshot_slots, 1);
  EXPECT_EQ(m.stats().cached_blocks, 3);
  auto hit = m.find_prefix(a);
  EXPECT_EQ(hit.num_tokens, 8) << "block 2 is cached but a hit past the last snapshot would lose KDA state";
  EXPECT_GE(hit.snapshot, 0);
  step(m, s, a, 3);  // 16: boundary again
  EXPECT_EQ(m.find_prefix(a).num_tokens, 16);
  m.free(s);
  expect_baseline(m);

  // Without snapshot slots a hybrid model gets no hits at all, while an MLA-only one still does.
  hybrid_memory none(hybrid_spec(), opts(32, 4, 0));
  EXPECT_FALSE(none.wants_block_aligned_steps());
  const seq_id t = none.admit(none.find_prefix(a), 0);
  step(none, t, a, 8);
  EXPECT_EQ(none.find_prefix(a).num_tokens, 0);
  none.free(t);
  expect_baseline(none);
}

TEST(PrefixCache, SnapshotRestoreIsBitExact) {
  hybrid_memory m(hybrid_spec(), opts(32));
  std::mt19937 rng(7);
  std::vector<token_id> a(23);
  for (auto& t : a) t = token_id(rng() % 1000);
  const seq_id s = m.admit(m.find_prefix(a), 0);
  step(m, s, a, 7);
  step(m, s, a, 5);  // 12
  const auto at12 = state_bytes(m, s);
  step(m, s, a, 9);  // 21: the state moves on
  ASSERT_NE(state_bytes(m, s), at12);
  m.free(s);  // the snapshot outlives its sequence

  auto b = a;
  b.resize(14);
  b.push_back(5);
  const auto hit = m.find_prefix(b);
  ASSERT_EQ(hit.num_tokens, 12);
  const seq_id t = m.admit(hit, 3);
  const auto restored = state_bytes(m, t);
  ASSERT_EQ(restored.size(), at12.size());
  EXPECT_EQ(std::memcmp(restored.data(), at12.data(), at12.size() * sizeof(float)), 0);

  // And it equals computing the prefix from scratch in a fresh sequence with other chunking.
  hybrid_memory fresh(hybrid_spec(), opts(32, 4, 0));
  const seq_id u = fresh.admit(fresh.find_prefix(a), 0);
  for (int i = 0; i < 12; ++i) step(fresh, u, a, 1);
  EXPECT_EQ(state_bytes(fresh, u), restored);
  fresh.free(u);
  m.free(t);
  expect_baseline(m);
}

TEST(PrefixCache, LruEvictsOnlyUnreferencedBlocksOldestFirst) {
  hybrid_memory m(mla_spec(), opts(8));
  const auto a = iota_tokens(9, 0), b = iota_tokens(9, 100), c = iota_tokens(9, 200);
  const seq_id sa = m.admit(m.find_prefix(a), 0);
  step(m, sa, a, 8);
  const seq_id sb = m.admit(m.find_prefix(b), 0);
  step(m, sb, b, 8);
  m.free(sb);  // b's two blocks: cached, unreferenced
  const seq_id sc = m.admit(m.find_prefix(c), 0);
  step(m, sc, c, 4);
  m.free(sc);  // c's block: cached, unreferenced, freed after b's
  EXPECT_EQ(m.stats().cached_blocks, 5);
  EXPECT_EQ(m.stats().free_blocks, 6);
  // Take 5 of the 6 free blocks: 3 never used, then b's two (freed before c's), c's survives.
  const seq_id big = m.admit({}, 20);
  EXPECT_EQ(m.find_prefix(b).num_tokens, 0) << "unreferenced and oldest: evicted";
  EXPECT_EQ(m.find_prefix(c).num_tokens, 4) << "freed later: still cached";
  EXPECT_EQ(m.find_prefix(a).num_tokens, 8) << "referenced blocks are never evicted";
  EXPECT_FALSE(m.reserve(big, 28)) << "only c's block is left";
  EXPECT_TRUE(m.reserve(big, 24));
  EXPECT_EQ(m.find_prefix(c).num_tokens, 0);
  EXPECT_EQ(m.find_prefix(a).num_tokens, 8);
  m.free(big);
  m.free(sa);
  expect_baseline(m);
}

TEST(PrefixCache, EvictingABlockDropsItsSnapshotAndSnapshotsAreLru) {
  hybrid_memory m(hybrid_spec(), opts(6, 4, 2));
  const auto a = iota_tokens(5, 0), b = iota_tokens(5, 50), c = iota_tokens(5, 90);
  for (const auto* t : {&a, &b, &c}) {
    const seq_id s = m.admit(m.find_prefix(*t), 0);
    step(m, s, *t, 4);
    m.free(s);
    m.check_invariants();
  }
  // Two snapshot slots: a's (oldest) was evicted by c's; its block is still cached but unusable.
  EXPECT_EQ(m.stats().used_snapshot_slots, 2);
  EXPECT_EQ(m.find_prefix(a).num_tokens, 0);
  EXPECT_EQ(m.find_prefix(b).num_tokens, 4);
  EXPECT_EQ(m.find_prefix(c).num_tokens, 4);
  // Now evict blocks: everything unreferenced goes, and the snapshots with it.
  const seq_id big = m.admit({}, 24);
  EXPECT_EQ(m.stats().used_snapshot_slots, 0);
  EXPECT_EQ(m.find_prefix(b).num_tokens, 0);
  m.free(big);
  expect_baseline(m);
}

TEST(HybridMemory, ForkSharesFullBlocksAndCopiesThePartialOne) {
  hybrid_memory m(hybrid_spec(), opts(16));
  const auto a = iota_tokens(10);
  const seq_id p = m.admit(m.find_prefix(a), 0);
  step(m, p, a, 10);
  const auto c = m.fork(p);
  ASSERT_TRUE(c);
  EXPECT_EQ(m.length(*c), 10);
  EXPECT_EQ(state_bytes(m, *c), state_bytes(m, p));
  const auto tp = m.block_table(p), tc = m.block_table(*c);
  ASSERT_EQ(tc.size(), 3u);
  EXPECT_EQ(tp[0], tc[0]);
  EXPECT_EQ(tp[1], tc[1]);
  EXPECT_NE(tp[2], tc[2]) << "the partial block is copied, so both can append";
  EXPECT_EQ(m.blocks().ref_count(tp[0]), 2);
  std::vector<float> rp(10 * 6), rc(10 * 6);
  m.read_latents(p, 3, 0, 10, rp.data(), nullptr);
  m.read_latents(*c, 3, 0, 10, rc.data(), nullptr);
  EXPECT_EQ(rp, rc);
  // Diverge: the parent's rows stay as they were.
  auto b = a;
  b.push_back(77);
  auto a2 = a;
  a2.push_back(11);
  step(m, *c, b, 1);
  step(m, p, a2, 1);
  std::vector<float> row_p(6), row_c(6);
  m.read_latents(p, 1, 10, 11, row_p.data(), nullptr);
  m.read_latents(*c, 1, 10, 11, row_c.data(), nullptr);
  EXPECT_EQ(row_p[0], 11.0f + 0.01f);  // fake_forward's row of token 11 in layer 1
  EXPECT_EQ(row_c[0], 77.0f + 0.01f);
  m.free(p);
  m.free(*c);
  expect_baseline(m);
}

TEST(HybridMemory, AdmissionNeedsASlotAndBlocksCountingPinnedHits) {
  hybrid_memory m(mla_spec(), opts(4, 2));
  const auto a = iota_tokens(9);
  const seq_id s = m.admit(m.find_prefix(a), 0);
  step(m, s, a, 8);
  m.free(s);  // 2 cached free blocks + 2 never used
  const auto hit = m.find_prefix(a);
  ASSERT_EQ(hit.num_tokens, 8);
  EXPECT_TRUE(m.can_admit(hit, 8));   // 2 more blocks: the 2 unused ones
  EXPECT_FALSE(m.can_admit(hit, 9));  // 3 more: would need to evict its own hit
  EXPECT_TRUE(m.can_admit({}, 16));   // without the hit all 4 are free
  const seq_id x = m.admit({}, 1);
  const seq_id y = m.admit({}, 1);
  EXPECT_FALSE(m.can_admit({}, 1)) << "no state slot left";
  m.free(x);
  m.free(y);
  expect_baseline(m);
}

TEST(HybridMemory, RandomAdmitReserveCommitForkFreeNeverLeaks) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    std::mt19937 rng(seed);
    hybrid_memory m(seed % 2 ? hybrid_spec() : mla_spec(), opts(24, 5, 3));
    // Prompts share a few prefixes so that admissions hit, forks share blocks, and eviction runs.
    std::vector<std::vector<token_id>> prefixes = {iota_tokens(9, 0), iota_tokens(6, 500),
                                                   iota_tokens(13, 900)};
    struct live {
      seq_id s;
      std::vector<token_id> tokens;
    };
    std::vector<live> seqs;
    for (int step = 0; step < 600; ++step) {
      const int op = int(rng() % 4);
      if (op == 0) {
        auto t = prefixes[rng() % prefixes.size()];
        for (int i = int(rng() % 8); i >= 0; --i) t.push_back(token_id(2000 + rng() % 5));
        const auto hit = m.find_prefix(t);
        const int64_t n = 1 + int64_t(rng() % uint32_t(int64_t(t.size()) - hit.num_tokens));
        if (!m.can_admit(hit, n)) continue;
        const seq_id s = m.admit(hit, n);
        EXPECT_EQ(m.length(s), hit.num_tokens);
        fake_forward(m, s, t, n);
        m.commit(s, t, n);
        seqs.push_back({s, t});
      } else if (op == 1 && !seqs.empty()) {  // one more chunk or token
        auto& x = seqs[rng() % seqs.size()];
        if (m.length(x.s) == int64_t(x.tokens.size())) x.tokens.push_back(token_id(rng() % 50));
        const int64_t n = 1 + int64_t(rng() % uint32_t(int64_t(x.tokens.size()) - m.length(x.s)));
        if (!m.reserve(x.s, n)) continue;
        fake_forward(m, x.s, x.tokens, n);
        m.commit(x.s, x.tokens, n);
      } else if (op == 2 && !seqs.empty()) {
        const auto& x = seqs[rng() % seqs.size()];
        if (auto c = m.fork(x.s)) {
          auto t = x.tokens;
          t.resize(size_t(m.length(*c)));
          seqs.push_back({*c, t});
        }
      } else if (op == 3 && !seqs.empty()) {
        const size_t i = rng() % seqs.size();
        m.free(seqs[i].s);
        seqs.erase(seqs.begin() + std::ptrdiff_t(i));
      }
      m.check_invariants();
    }
    for (const auto& x : seqs) m.free(x.s);
    expect_baseline(m);
  }
}

// Two pipeline stages' memories (each holding half of the layers) under the calls a serving group's
// replicas make, against the memory of the whole model: the same sequence ids, prefix hits, block tables,
// lengths and counts after every call, the held layers' states and rows bit for bit the whole's, and only
// the held layers' bytes.
TEST(HybridMemory, PipelineStagesHoldTheirLayersAndDecideLikeTheWhole) {
  const cache_spec whole = swa_hybrid_spec();  // KDA, SWA, MLA, SWA
  cache_spec first = whole, second = whole;
  first.held = {true, true, false, false};
  second.held = {false, false, true, true};
  EXPECT_EQ(first.bytes_per_block(4), 0u);
  EXPECT_EQ(second.bytes_per_block(4), whole.bytes_per_block(4));
  EXPECT_EQ(first.bytes_per_state_slot() + second.bytes_per_state_slot(), whole.bytes_per_state_slot());
  EXPECT_EQ(first.bytes_per_state_slot(),
            size_t(whole.state_floats(attn_kind::KDA) + whole.state_floats(attn_kind::SWA)) * sizeof(float));
  std::deque<hybrid_memory> ms;  // (never moved: a memory's pool calls back into it)
  for (const auto& spec : {whole, first, second}) ms.emplace_back(spec, opts(24, 5, 3));
  EXPECT_EQ(ms[1].state_slots().slot_floats() * sizeof(float), first.bytes_per_state_slot());
  EXPECT_EQ(ms[1].wants_block_aligned_steps(), ms[0].wants_block_aligned_steps());
  EXPECT_EQ(ms[2].wants_block_aligned_steps(), ms[0].wants_block_aligned_steps());

  std::mt19937 rng(7);
  const std::vector<std::vector<token_id>> prefixes = {iota_tokens(9, 0), iota_tokens(13, 900)};
  struct live {
    seq_id s;
    std::vector<token_id> tokens;
  };
  std::vector<live> seqs;
  auto same_everywhere = [&] {
    for (size_t k = 1; k < ms.size(); ++k) {
      const auto a = ms[0].stats(), b = ms[k].stats();
      ASSERT_EQ(a.free_blocks, b.free_blocks);
      ASSERT_EQ(a.cached_blocks, b.cached_blocks);
      ASSERT_EQ(a.free_state_slots, b.free_state_slots);
      ASSERT_EQ(a.used_snapshot_slots, b.used_snapshot_slots);
      ASSERT_EQ(a.live_sequences, b.live_sequences);
      for (const auto& x : seqs) {
        ASSERT_EQ(ms[k].length(x.s), ms[0].length(x.s));
        const auto ta = ms[0].block_table(x.s), tb = ms[k].block_table(x.s);
        ASSERT_TRUE(std::equal(ta.begin(), ta.end(), tb.begin(), tb.end()));
      }
      ms[k].check_invariants();
    }
  };
  for (int step = 0; step < 400; ++step) {
    const int op = int(rng() % 4);
    if (op == 0) {
      auto t = prefixes[rng() % prefixes.size()];
      for (int i = int(rng() % 8); i >= 0; --i) t.push_back(token_id(2000 + rng() % 5));
      const auto hit = ms[0].find_prefix(t);
      const int64_t n = 1 + int64_t(rng() % uint32_t(int64_t(t.size()) - hit.num_tokens));
      if (!ms[0].can_admit(hit, n)) continue;
      seq_id s = -1;
      for (auto& m : ms) {
        const auto h = m.find_prefix(t);
        ASSERT_EQ(h.num_tokens, hit.num_tokens);
        ASSERT_EQ(h.blocks, hit.blocks);
        ASSERT_TRUE(m.can_admit(h, n));
        const seq_id mine = m.admit(h, n);
        if (s >= 0) {
          ASSERT_EQ(mine, s);
        }
        s = mine;
        fake_forward(m, s, t, n);
        m.commit(s, t, n);
      }
      seqs.push_back({s, t});
    } else if (op == 1 && !seqs.empty()) {
      auto& x = seqs[rng() % seqs.size()];
      if (ms[0].length(x.s) == int64_t(x.tokens.size())) x.tokens.push_back(token_id(rng() % 50));
      const int64_t n = 1 + int64_t(rng() % uint32_t(int64_t(x.tokens.size()) - ms[0].length(x.s)));
      if (!ms[0].reserve(x.s, n)) continue;
      for (size_t k = 0; k < ms.size(); ++k) {
        if (k > 0) {
          ASSERT_TRUE(ms[k].reserve(x.s, n));
        }
        fake_forward(ms[k], x.s, x.tokens, n);
        ms[k].commit(x.s, x.tokens, n);
      }
    } else if (op == 2 && !seqs.empty()) {
      const auto x = seqs[rng() % seqs.size()];
      const auto c = ms[0].fork(x.s);
      for (size_t k = 1; k < ms.size(); ++k) ASSERT_EQ(ms[k].fork(x.s), c);
      if (c) {
        auto t = x.tokens;
        t.resize(size_t(ms[0].length(*c)));
        seqs.push_back({*c, t});
      }
    } else if (op == 3 && !seqs.empty()) {
      const size_t i = rng() % seqs.size();
      for (auto& m : ms) m.free(seqs[i].s);
      seqs.erase(seqs.begin() + std::ptrdiff_t(i));
    }
    same_everywhere();
    if (::testing::Test::HasFatalFailure()) return;
  }
  // What the stages hold is what the whole holds for those layers.
  ASSERT_FALSE(seqs.empty());
  for (const auto& x : seqs)
    for (size_t l = 0; l < whole.layers.size(); ++l) {
      hybrid_memory& stage = ms[l < 2 ? 1 : 2];
      if (whole.layers[l] == attn_kind::MLA) {
        const int64_t n = ms[0].length(x.s);
        std::vector<float> la(size_t(n * whole.latent_width)), lb(la.size()), ia(size_t(n * whole.index_width)),
            ib(ia.size());
        ms[0].read_latents(x.s, int64_t(l), 0, n, la.data(), ia.data());
        stage.read_latents(x.s, int64_t(l), 0, n, lb.data(), ib.data());
        EXPECT_EQ(la, lb);
        EXPECT_EQ(ia, ib);
      } else {
        const size_t f = size_t(whole.state_floats(whole.layers[l]));
        EXPECT_EQ(std::memcmp(ms[0].state(x.s, int64_t(l)), stage.state(x.s, int64_t(l)), f * sizeof(float)), 0)
            << "layer " << l;
      }
    }
}

}  // namespace
}  // namespace moxi::memory
