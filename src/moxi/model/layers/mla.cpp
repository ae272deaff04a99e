// MLA / Gated DSA forward in absorbed mode (DeepSeek-V3 model.py attn_impl "absorb"; DeepSeek-V3.2 Indexer
// for the sparse path), composed from the kernel backend's MLA, DSA and RoPE ops (kernels/backend.h). The
// expanded (MHA) mode is only in the tests, as the independent reference this is checked against.
#include "moxi/model/layers/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moxi/base/error.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/model/layers/rope.h"

namespace moxi::model {

namespace ref = kernels::ref;

namespace {

// DeepSeek-V3.2 Indexer: k_norm = LayerNorm(index_head_dim) with the torch default eps.
constexpr float kIndexerKeyNormEps = 1e-6f;

}  // namespace

void indexer_topk_split(const process_group& g, const float* q, const uint8_t* keys, const float* w,
                        int32_t* indices, int64_t T, int64_t S, int64_t HI, int64_t D, int64_t k) {
  MOXI_ASSERT(S >= T && k > 0);
  const int n = g.size(), me = g.rank();
  const kernels::backend& be = kernels::active();
  // Per query, k candidates of this rank: (score, position as int32 bits) pairs, position -1 = none.
  const int64_t per_rank = T * k * 2;
  std::vector<float> mine(static_cast<size_t>(per_rank));
  auto put = [](float* at, float score, int32_t pos) {
    at[0] = score;
    std::memcpy(at + 1, &pos, 4);
  };
  auto pos_of = [](const float* at) {
    int32_t pos;
    std::memcpy(&pos, at + 1, 4);
    return pos;
  };
  std::vector<float> scores;
  std::vector<int32_t> order;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t visible = S - T + t + 1, a = visible * me / n, len = visible * (me + 1) / n - a;
    float* out = mine.data() + t * k * 2;
    for (int64_t j = 0; j < k; ++j) put(out + 2 * j, 0.0f, -1);
    if (len == 0) continue;
    scores.resize(size_t(len));
    // One query over keys it all sees (T = 1: the kernel's causal mask hides nothing).
    be.indexer_scores(q + t * HI * D, keys + a * ref::index_key_bytes(D), w + t * HI, scores.data(), 1, len,
                      HI, D);
    order.resize(size_t(len));
    for (int64_t s = 0; s < len; ++s) order[size_t(s)] = int32_t(s);
    const int64_t m = std::min(k, len);
    std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](int32_t x, int32_t y) {
      return kernels::ref::indexer_ranks_before(scores[size_t(x)], x, scores[size_t(y)], y);
    });
    for (int64_t j = 0; j < m; ++j)
      put(out + 2 * j, scores[size_t(order[size_t(j)])], int32_t(a + order[size_t(j)]));
  }
  std::vector<float> all(size_t(n * per_rank));
  const std::vector<int64_t> counts(size_t(n), per_rank);
  g.all_gather_v(mine.data(), counts, all.data());

  std::vector<std::pair<float, int32_t>> cand;
  for (int64_t t = 0; t < T; ++t) {
    cand.clear();
    for (int r = 0; r < n; ++r) {
      const float* c = all.data() + r * per_rank + t * k * 2;
      for (int64_t j = 0; j < k && pos_of(c + 2 * j) >= 0; ++j)
        cand.emplace_back(c[2 * j], pos_of(c + 2 * j));
    }
    const int64_t m = std::min(k, int64_t(cand.size()));
    std::partial_sort(cand.begin(), cand.begin() + m, cand.end(), [](const auto& x, const auto& y) {
      return kernels::ref::indexer_ranks_before(x.first, x.second, y.first, y.second);
    });
    int32_t* row = indices + t * k;
    for (int64_t j = 0; j < k; ++j) row[j] = j < m ? cand[size_t(j)].second : -1;
  }
}

mla_weights load_mla(weight_loader& ld, const std::string& p) {
  const auto& c = ld.config();
  const auto& m = *c.mla;
  const int64_t h = c.hidden_size, H = m.num_heads, L = m.kv_lora_rank, Dr = m.qk_rope_head_dim;
  mla_weights w;
  // The projections of x, in mla_in order where present, stacked into w.in_proj below.
  std::vector<linear> parts;
  auto add = [&](mla_in which, linear l) {
    w.in_part[which] = int(parts.size());
    parts.push_back(std::move(l));
  };
  if (m.q_lora_rank) {
    add(MLA_Q, ld.lin(p + ".q_a_proj", *m.q_lora_rank, h));
    w.q_a_norm = ld.f32(p + ".q_a_layernorm.weight", {*m.q_lora_rank});
    w.q_b = ld.lin(p + ".q_b_proj", H * m.qk_head_dim(), *m.q_lora_rank);
  } else {
    add(MLA_Q, ld.lin(p + ".q_proj", H * m.qk_head_dim(), h));
  }
  add(MLA_KV, ld.lin(p + ".kv_a_proj_with_mqa", L + Dr, h));
  w.kv_a_norm = ld.f32(p + ".kv_a_layernorm.weight", {L});
  // f32: the absorbed attention reads kv_b's weights directly, not through linear::apply.
  w.kv_b = ld.lin(p + ".kv_b_proj", H * (m.qk_nope_head_dim + m.v_head_dim), L, /*need_f32=*/true);
  w.wuv_t = kernels::active().pack_mla_uv(w.kv_b.w.data(), H, m.qk_nope_head_dim, m.v_head_dim, L);
  if (m.output_gate) add(MLA_GATE, ld.lin(p + ".g_proj", H * m.v_head_dim, h));
  w.o_proj = ld.lin(p + ".o_proj", h, H * m.v_head_dim);
  if (c.dsa) {
    const auto& d = *c.dsa;
    indexer_weights iw;
    iw.wq_b = ld.lin(p + ".indexer.wq_b", d.index_n_heads * d.index_head_dim, *m.q_lora_rank);
    add(MLA_INDEX_K, ld.lin(p + ".indexer.wk", d.index_head_dim, h));
    iw.k_norm_w = ld.f32(p + ".indexer.k_norm.weight", {d.index_head_dim});
    iw.k_norm_b = ld.f32(p + ".indexer.k_norm.bias", {d.index_head_dim});
    add(MLA_INDEX_W, ld.lin(p + ".indexer.weights_proj", d.index_n_heads, h));
    iw.parallel = ld.options().parallel;
    w.indexer = std::move(iw);
  }
  std::vector<linear*> ptrs;
  for (auto& l : parts) ptrs.push_back(&l);
  w.in_proj = stacked_linear::stack(ptrs);
  // NoPE MLA (Kimi, seed) has no rotation and, with it, no YaRN softmax correction.
  double mscale = 1.0;
  if (!m.use_nope) {
    const auto yarn = yarn_of(c.rope);
    w.inv_freq.resize(size_t(Dr / 2));
    ref::rope_inv_freq(yarn, Dr, w.inv_freq.data());
    w.rope_attention_factor = ref::yarn_attention_factor(yarn);
    mscale = ref::yarn_softmax_mscale(yarn);
  }
  w.softmax_scale = float(1.0 / std::sqrt(double(m.qk_head_dim())) * mscale * mscale);
  return w;
}

void mla_forward(const mla_weights& w, const formats::model_config& c, const float* x, int64_t T,
                 sequence_cache& cache, int64_t layer, float* out, const dump_sink* dump_to,
                 const std::string& name) {
  const seq_rows seg{0, T, &cache};
  mla_forward_batch(w, c, x, T, std::span(&seg, 1), layer, out, dump_to, name);
}

void mla_forward_batch(const mla_weights& w, const formats::model_config& c, const float* x, int64_t R,
                       std::span<const seq_rows> segs, int64_t layer, float* out, const dump_sink* dump_to,
                       const std::string& name) {
  const auto& m = *c.mla;
  const int64_t H = m.num_heads, Dn = m.qk_nope_head_dim, Dr = m.qk_rope_head_dim, Dv = m.v_head_dim;
  const int64_t L = m.kv_lora_rank, Dq = Dn + Dr, Wl = L + Dr;
  const float eps = float(c.rms_norm_eps);
  const kernels::backend& be = kernels::active();

  // Every projection of x in one GEMV: f32 [R, in_proj.all.out]; part(p, dst) copies projection p out.
  std::vector<float> xin(size_t(R * w.in_proj.all.out));
  w.in_proj.apply(x, xin.data(), R);
  auto part = [&](mla_in p, float* dst) { w.in_proj.extract(xin.data(), R, size_t(w.in_part[p]), dst); };

  // Queries f32 [R, H, Dn+Dr], through the q-LoRA latent c_Q when present (the indexer reads c_Q too).
  std::vector<float> cq, q(size_t(R * H * Dq));
  if (m.q_lora_rank) {
    const int64_t rq = *m.q_lora_rank;
    cq.resize(size_t(R * rq));
    part(MLA_Q, cq.data());
    be.rms_norm(cq.data(), w.q_a_norm.data(), cq.data(), R, rq, eps);
    w.q_b.apply(cq.data(), q.data(), R);
  } else {
    part(MLA_Q, q.data());
  }

  // Per sequence: its cache length before this call, the rows appended to its cache, its RoPE tables.
  struct seq_state {
    int64_t S0 = 0;
    mla_append_ref rows;
    std::vector<float> cos, sin;  // f32 [T, Dr/2]
  };
  std::vector<seq_state> st(segs.size());
  std::vector<float> kv(size_t(R * Wl));  // f32 [R, L+Dr]
  part(MLA_KV, kv.data());
  for (size_t i = 0; i < segs.size(); ++i) {
    const int64_t T = segs[i].T, r0 = segs[i].begin;
    sequence_cache& cache = *segs[i].cache;
    st[i].S0 = cache.mla(layer).length;
    st[i].rows = cache.mla_append(layer, T);
    // New latent rows [c_kv after kv_a_layernorm | k_pe] straight into the cache.
    for (int64_t t = 0; t < T; ++t) {
      const float* kr = kv.data() + (r0 + t) * Wl;
      be.rms_norm(kr, w.kv_a_norm.data(), st[i].rows.latent + t * Wl, 1, L, eps);
      std::memcpy(st[i].rows.latent + t * Wl + L, kr + L, size_t(Dr) * sizeof(float));
    }
    if (!m.use_nope) {
      std::vector<int64_t> pos(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = st[i].S0 + t;
      st[i].cos.resize(size_t(T * Dr / 2));
      st[i].sin.resize(size_t(T * Dr / 2));
      be.rope_cos_sin(pos.data(), w.inv_freq.data(), w.rope_attention_factor, st[i].cos.data(),
                      st[i].sin.data(), T, Dr);
      be.rope_apply(q.data() + r0 * H * Dq + Dn, st[i].cos.data(), st[i].sin.data(), T, H, H * Dq, Dq, Dr,
                    ref::RopeLayout::kInterleaved);
      be.rope_apply(st[i].rows.latent + L, st[i].cos.data(), st[i].sin.data(), T, 1, Wl, 0, Dr,
                    ref::RopeLayout::kInterleaved);
    }
  }
  dump(dump_to, name + ".q", {R, H, Dq}, q.data());
  if (dump_to && dump_to->wants(name + ".latent")) {
    std::vector<float> lat(size_t(R * Wl));  // the new cache rows of every sequence, in row order
    for (size_t i = 0; i < segs.size(); ++i)
      std::memcpy(lat.data() + segs[i].begin * Wl, st[i].rows.latent, size_t(segs[i].T * Wl) * sizeof(float));
    dump_to->put(name + ".latent", {R, Wl}, lat.data());
  }

  std::vector<float> q_lat(size_t(R * H * Wl));  // f32 [R, H, L+Dr]
  be.mla_absorb_q(q.data(), w.kv_b.w.data(), q_lat.data(), R, H, Dn, Dr, Dv, L);

  std::vector<float> o_lat(size_t(R * H * L));  // f32 [R, H, L]
  if (w.indexer) {
    const auto& d = *c.dsa;
    const auto& iw = *w.indexer;
    const int64_t HI = d.index_n_heads, DI = d.index_head_dim;
    std::vector<float> qI(size_t(R * HI * DI));  // f32 [R, HI, DI], rope dims first
    iw.wq_b.apply(cq.data(), qI.data(), R);
    std::vector<float> kI(size_t(R * DI));  // f32 [R, DI] new index keys, quantized into each cache below
    part(MLA_INDEX_K, kI.data());
    be.layer_norm(kI.data(), iw.k_norm_w.data(), iw.k_norm_b.data(), kI.data(), R, DI, kIndexerKeyNormEps);
    std::vector<float> wts(size_t(R * HI));  // f32 [R, HI]
    part(MLA_INDEX_W, wts.data());
    const float wscale = float(1.0 / std::sqrt(double(HI)) / std::sqrt(double(DI)));
    for (float& v : wts) v *= wscale;

    std::vector<float> topk_dump;
    const bool want_topk = dump_to && dump_to->wants(name + ".topk");
    if (want_topk) topk_dump.assign(size_t(R * d.index_topk), -1.0f);
    for (size_t i = 0; i < segs.size(); ++i) {
      const int64_t T = segs[i].T, r0 = segs[i].begin, S0 = st[i].S0;
      float* keys = kI.data() + r0 * DI;
      float* qIs = qI.data() + r0 * HI * DI;
      if (!m.use_nope) {  // half-split (NeoX) layout, rope dims first: traps 1 and 2 of the reference note
        be.rope_apply(qIs, st[i].cos.data(), st[i].sin.data(), T, HI, HI * DI, DI, Dr,
                      ref::RopeLayout::kHalfSplit);
        be.rope_apply(keys, st[i].cos.data(), st[i].sin.data(), T, 1, DI, 0, Dr, ref::RopeLayout::kHalfSplit);
      }
      // Cached in FP8 with a power-of-two scale per key, as DeepSeek-V3.2 caches them (kernels/ref/dsa.h).
      ref::quantize_index_keys(keys, st[i].rows.index_keys, T, DI);
      const mla_view view = segs[i].cache->mla(layer);
      const int64_t S = view.length;
      const int64_t k = std::min(d.index_topk, S);
      std::vector<int32_t> idx(size_t(T * k));  // i32 [T, k], -1 padded
      std::vector<float> scores;
      // Under tensor parallelism the tp ranks share the scan once each of them would still discard keys
      // (more than k visible per rank): the all-gather of k candidates per rank then costs far fewer bytes
      // than the scan it saves (docs/distributed.md "DSA indexer").
      const process_group* tp = iw.parallel && iw.parallel->sizes.tp > 1 ? iw.parallel->tp.get() : nullptr;
      // Queries in blocks whose score rows stay within kIndexerScoreFloats (256 queries up to 32K keys,
      // 8 at 1M), so that a long prompt's scan never holds a [T, S] matrix.
      const int64_t qb =
          std::clamp<int64_t>(kIndexerScoreFloats / std::max<int64_t>(1, S), 1, kIndexerQueryBlock);
      scores.reserve(size_t(std::min(qb, T) * S));  // the largest block: one buffer, never regrown
      for (int64_t t0 = 0; t0 < T; t0 += qb) {
        const int64_t tb = std::min(qb, T - t0), Sb = S0 + t0 + tb;
        if (tp && indexer_scan_splits(S0 + t0 + 1, k, tp->size())) {
          indexer_topk_split(*tp, qIs + t0 * HI * DI, view.index_keys, wts.data() + (r0 + t0) * HI,
                             idx.data() + t0 * k, tb, Sb, HI, DI, k);
          continue;
        }
        scores.resize(size_t(tb * Sb));
        be.indexer_scores(qIs + t0 * HI * DI, view.index_keys, wts.data() + (r0 + t0) * HI, scores.data(), tb,
                          Sb, HI, DI);
        be.indexer_topk(scores.data(), idx.data() + t0 * k, tb, Sb, k);
      }
      if (want_topk)  // padded to index_topk columns so that dumps of successive calls line up
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < k; ++j)
            topk_dump[size_t((r0 + t) * d.index_topk + j)] = float(idx[size_t(t * k + j)]);
      be.mla_attention_absorbed_sparse(q_lat.data() + r0 * H * Wl, view.latent, idx.data(),
                                       o_lat.data() + r0 * H * L, T, S, H, L, Dr, k, w.softmax_scale);
    }
    if (want_topk) dump_to->put(name + ".topk", {R, d.index_topk}, topk_dump.data());
  } else {
    for (const auto& sg : segs) {
      const mla_view view = sg.cache->mla(layer);
      be.mla_attention_absorbed(q_lat.data() + sg.begin * H * Wl, view.latent,
                                o_lat.data() + sg.begin * H * L, sg.T, view.length, H, L, Dr,
                                w.softmax_scale);
    }
  }

  std::vector<float> o(size_t(R * H * Dv));  // f32 [R, H*Dv]
  be.mla_unabsorb_o(o_lat.data(), w.kv_b.w.data(), w.wuv_t, o.data(), R, H, Dn, Dv, L);
  dump(dump_to, name + ".o", {R, H, Dv}, o.data());
  if (w.in_part[MLA_GATE] >= 0) {
    std::vector<float> g(size_t(R * H * Dv));
    part(MLA_GATE, g.data());
    be.mul_sigmoid(o.data(), g.data(), o.data(), R * H * Dv);
    dump(dump_to, name + ".gated", {R, H, Dv}, o.data());
  }
  w.o_proj.apply(o.data(), out, R);
}

}  // namespace moxi::model
