// MLA / Gated DSA forward in absorbed mode (DeepSeek-V3 model.py attn_impl "absorb"; DeepSeek-V3.2 Indexer
// for the sparse path), composed from kernels/ref/mla.h and dsa.h. The expanded (MHA) mode is only in the
// tests, as the independent reference this is checked against.
#include "moxi/model/layers/mla.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/kernels/ref/mla.h"

namespace moxi::model {

namespace ref = kernels::ref;

namespace {

// Queries scored per indexer call: bounds the [block, S] score buffer at long context.
constexpr int64_t kIndexerQueryBlock = 256;
// DeepSeek-V3.2 Indexer: k_norm = LayerNorm(index_head_dim) with the torch default eps.
constexpr float kIndexerKeyNormEps = 1e-6f;

ref::YarnConfig yarn_of(const formats::rope_config& r) {
  ref::YarnConfig y;
  y.theta = r.theta;
  y.factor = r.yarn ? r.factor : 1.0;
  y.original_max_position = double(r.original_max_position_embeddings);
  y.beta_fast = r.beta_fast;
  y.beta_slow = r.beta_slow;
  y.mscale = r.mscale;
  y.mscale_all_dim = r.mscale_all_dim;
  return y;
}

}  // namespace

mla_weights load_mla(weight_loader& ld, const std::string& p) {
  const auto& c = ld.config();
  const auto& m = *c.mla;
  const int64_t h = c.hidden_size, H = m.num_heads, L = m.kv_lora_rank, Dr = m.qk_rope_head_dim;
  mla_weights w;
  if (m.q_lora_rank) {
    w.q_a = ld.lin(p + ".q_a_proj", *m.q_lora_rank, h);
    w.q_a_norm = ld.f32(p + ".q_a_layernorm.weight", {*m.q_lora_rank});
    w.q_b = ld.lin(p + ".q_b_proj", H * m.qk_head_dim(), *m.q_lora_rank);
  } else {
    w.q_proj = ld.lin(p + ".q_proj", H * m.qk_head_dim(), h);
  }
  w.kv_a = ld.lin(p + ".kv_a_proj_with_mqa", L + Dr, h);
  w.kv_a_norm = ld.f32(p + ".kv_a_layernorm.weight", {L});
  // f32: the absorbed attention reads kv_b's weights directly, not through linear::apply.
  w.kv_b = ld.lin(p + ".kv_b_proj", H * (m.qk_nope_head_dim + m.v_head_dim), L, /*need_f32=*/true);
  if (m.output_gate) w.g_proj = ld.lin(p + ".g_proj", H * m.v_head_dim, h);
  w.o_proj = ld.lin(p + ".o_proj", h, H * m.v_head_dim);
  if (c.dsa) {
    const auto& d = *c.dsa;
    indexer_weights iw;
    iw.wq_b = ld.lin(p + ".indexer.wq_b", d.index_n_heads * d.index_head_dim, *m.q_lora_rank);
    iw.wk = ld.lin(p + ".indexer.wk", d.index_head_dim, h);
    iw.k_norm_w = ld.f32(p + ".indexer.k_norm.weight", {d.index_head_dim});
    iw.k_norm_b = ld.f32(p + ".indexer.k_norm.bias", {d.index_head_dim});
    iw.weights_proj = ld.lin(p + ".indexer.weights_proj", d.index_n_heads, h);
    w.indexer = std::move(iw);
  }
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
  const auto& m = *c.mla;
  const int64_t H = m.num_heads, Dn = m.qk_nope_head_dim, Dr = m.qk_rope_head_dim, Dv = m.v_head_dim;
  const int64_t L = m.kv_lora_rank, Dq = Dn + Dr, Wl = L + Dr;
  const float eps = float(c.rms_norm_eps);

  // Queries f32 [T, H, Dn+Dr], through the q-LoRA latent c_Q when present (the indexer reads c_Q too).
  std::vector<float> cq, q(size_t(T * H * Dq));
  if (!w.q_a.empty()) {
    const int64_t rq = w.q_a.out;
    cq.resize(size_t(T * rq));
    w.q_a.apply(x, cq.data(), T);
    ref::rms_norm(cq.data(), w.q_a_norm.data(), cq.data(), T, rq, eps);
    w.q_b.apply(cq.data(), q.data(), T);
  } else {
    w.q_proj.apply(x, q.data(), T);
  }

  // New latent rows [c_kv after kv_a_layernorm | k_pe] straight into the cache.
  const int64_t S0 = cache.mla(layer).length;
  const mla_append_ref rows = cache.mla_append(layer, T);
  {
    std::vector<float> kv(size_t(T * Wl));  // f32 [T, L+Dr]
    w.kv_a.apply(x, kv.data(), T);
    for (int64_t t = 0; t < T; ++t) {
      ref::rms_norm(kv.data() + t * Wl, w.kv_a_norm.data(), rows.latent + t * Wl, 1, L, eps);
      std::memcpy(rows.latent + t * Wl + L, kv.data() + t * Wl + L, size_t(Dr) * sizeof(float));
    }
  }
  std::vector<float> cos, sin;
  if (!m.use_nope) {
    std::vector<int64_t> pos(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = S0 + t;
    cos.resize(size_t(T * Dr / 2));
    sin.resize(size_t(T * Dr / 2));
    ref::rope_cos_sin(pos.data(), w.inv_freq.data(), w.rope_attention_factor, cos.data(), sin.data(), T, Dr);
    ref::rope_apply(q.data() + Dn, cos.data(), sin.data(), T, H, H * Dq, Dq, Dr,
                    ref::RopeLayout::kInterleaved);
    ref::rope_apply(rows.latent + L, cos.data(), sin.data(), T, 1, Wl, 0, Dr, ref::RopeLayout::kInterleaved);
  }
  dump(dump_to, name + ".q", {T, H, Dq}, q.data());
  dump(dump_to, name + ".latent", {T, Wl}, rows.latent);

  std::vector<float> q_lat(size_t(T * H * Wl));  // f32 [T, H, L+Dr]
  ref::mla_absorb_q(q.data(), w.kv_b.w.data(), q_lat.data(), T, H, Dn, Dr, Dv, L);

  std::vector<float> o_lat(size_t(T * H * L));  // f32 [T, H, L]
  if (w.indexer) {
    const auto& d = *c.dsa;
    const auto& iw = *w.indexer;
    const int64_t HI = d.index_n_heads, DI = d.index_head_dim;
    std::vector<float> qI(size_t(T * HI * DI));  // f32 [T, HI, DI], rope dims first
    iw.wq_b.apply(cq.data(), qI.data(), T);
    iw.wk.apply(x, rows.index_keys, T);
    ref::layer_norm(rows.index_keys, iw.k_norm_w.data(), iw.k_norm_b.data(), rows.index_keys, T, DI,
                    kIndexerKeyNormEps);
    if (!m.use_nope) {  // half-split (NeoX) layout, rope dims first: traps 1 and 2 of the reference note
      ref::rope_apply(qI.data(), cos.data(), sin.data(), T, HI, HI * DI, DI, Dr, ref::RopeLayout::kHalfSplit);
      ref::rope_apply(rows.index_keys, cos.data(), sin.data(), T, 1, DI, 0, Dr, ref::RopeLayout::kHalfSplit);
    }
    std::vector<float> wts(size_t(T * HI));  // f32 [T, HI]
    iw.weights_proj.apply(x, wts.data(), T);
    const float wscale = float(1.0 / std::sqrt(double(HI)) / std::sqrt(double(DI)));
    for (float& v : wts) v *= wscale;

    const mla_view view = cache.mla(layer);
    const int64_t S = view.length;
    const int64_t k = std::min(d.index_topk, S);
    std::vector<int32_t> idx(size_t(T * k));  // i32 [T, k], -1 padded
    std::vector<float> scores;
    for (int64_t t0 = 0; t0 < T; t0 += kIndexerQueryBlock) {
      const int64_t tb = std::min(kIndexerQueryBlock, T - t0), Sb = S0 + t0 + tb;
      scores.resize(size_t(tb * Sb));
      ref::indexer_scores(qI.data() + t0 * HI * DI, view.index_keys, wts.data() + t0 * HI, scores.data(), tb,
                          Sb, HI, DI);
      ref::indexer_topk(scores.data(), idx.data() + t0 * k, tb, Sb, k);
    }
    if (dump_to && dump_to->wants(name + ".topk")) {
      // Padded to index_topk columns so that dumps of successive calls line up.
      std::vector<float> f(size_t(T * d.index_topk), -1.0f);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) f[size_t(t * d.index_topk + j)] = float(idx[size_t(t * k + j)]);
      dump_to->put(name + ".topk", {T, d.index_topk}, f.data());
    }
    if (kernels::fast_kernels() && T > 1) {
      // Queries are independent here (each attends to its own selected rows, no positional mask), so
      // splitting them over the pool is bit-identical to one call.
      thread_pool::global().run([&](int tid, int nt) {
        const range r = split_range(T, tid, nt);
        if (r.begin < r.end)
          ref::mla_attention_absorbed_sparse(q_lat.data() + r.begin * H * Wl, view.latent,
                                             idx.data() + r.begin * k, o_lat.data() + r.begin * H * L,
                                             r.end - r.begin, S, H, L, Dr, k, w.softmax_scale);
      });
    } else {
      ref::mla_attention_absorbed_sparse(q_lat.data(), view.latent, idx.data(), o_lat.data(), T, S, H, L, Dr,
                                         k, w.softmax_scale);
    }
  } else {
    const mla_view view = cache.mla(layer);
    ref::mla_attention_absorbed(q_lat.data(), view.latent, o_lat.data(), T, view.length, H, L, Dr,
                                w.softmax_scale);
  }

  std::vector<float> o(size_t(T * H * Dv));  // f32 [T, H*Dv]
  ref::mla_unabsorb_o(o_lat.data(), w.kv_b.w.data(), o.data(), T, H, Dn, Dv, L);
  dump(dump_to, name + ".o", {T, H, Dv}, o.data());
  if (!w.g_proj.empty()) {
    std::vector<float> g(size_t(T * H * Dv));
    w.g_proj.apply(x, g.data(), T);
    ref::mul_sigmoid(o.data(), g.data(), o.data(), T * H * Dv);
    dump(dump_to, name + ".gated", {T, H, Dv}, o.data());
  }
  w.o_proj.apply(o.data(), out, T);
}

}  // namespace moxi::model
