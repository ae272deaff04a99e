// The attention kinds' table: KDA, MLA / Gated DSA and sliding-window attention behind one interface.
#include "moxi/model/layers/attention.h"

#include <algorithm>

#include "moxi/base/error.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/model/arch/blocks.h"
#include "moxi/model/layers/kda.h"
#include "moxi/model/layers/mla.h"
#include "moxi/model/layers/swa.h"

namespace moxi::model {
namespace {

using formats::attn_kind;
using formats::model_config;

// ---- KDA: constant-size state [conv_q | conv_k | conv_v | recurrent] (cache.h kda_state_ref) ----

int64_t kda_conv_floats(const model_config& c) {
  return (c.kda->conv_kernel - 1) * c.kda->proj_dim();
}

class kda_layer final : public attention_layer {
 public:
  explicit kda_layer(kda_weights w) : w_(std::move(w)) {}
  void forward_batch(const model_config& c, const float* x, int64_t R, std::span<const seq_rows> segs,
                     int64_t slot, float* out, const dump_sink* dump,
                     const std::string& name) const override {
    const int64_t n = kda_conv_floats(c);
    std::vector<kda_state_ref> states;
    std::vector<float*> traces;
    bool traced = false;
    states.reserve(segs.size());
    for (const auto& s : segs) {
      float* p = s.cache->state(slot);
      states.push_back({p, p + n, p + 2 * n, p + 3 * n});
      traces.push_back(s.cache->state_trace(slot, s.T));
      traced = traced || traces.back();
    }
    kda_forward_batch(w_, c, x, R, segs, states, out, dump, name,
                      traced ? std::span<float* const>(traces) : std::span<float* const>());
  }

 private:
  kda_weights w_;
};

attention_plan_figures kda_plan(const model_config& c, cache_format cache, int64_t, int tp) {
  const auto& k = *c.kda;
  attention_plan_figures f;
  // fp32 recurrent state + BF16 conv state (f32 on the CPU engine); a decode step reads and writes all of it.
  f.state_bytes = uint64_t(k.num_heads * k.head_dim * k.head_dim) * 4 +
                  uint64_t(3 * (k.conv_kernel - 1) * k.proj_dim()) * (cache == cache_format::F32 ? 4 : 2);
  f.decode_read_bytes = 2.0 * double(f.state_bytes);
  f.tp_split = tp;  // split by heads
  return f;
}

// kda_forward_batch's buffers per row: the stacked projections (q, k, v, f_a, beta, gate), the conv input,
// q/k/v after the conv, f_a, the decay gate, beta, the core output and the output gate; and while the core
// runs split over the pool, each thread's copies of its heads' q, k, v, g, beta and output (all heads once).
// All are per-thread scratch kept between calls (kda.cpp, kernels/backend.cpp).
double kda_work(const model_config& c, int64_t rows, int64_t, int tp) {
  const auto& k = *c.kda;
  const double P = double(k.proj_dim()) / tp, D = double(k.head_dim), H = double(k.num_heads) / tp;
  const double gate = k.full_rank_output_gate ? P : P + D;  // low rank: g_b's output and g_a's rows
  const double in = 3 * P + D + H + (k.full_rank_output_gate ? P : D);
  return double(rows) * (in + P + 3 * P + D + P + H + P + gate + 5 * P + H);
}

const attention_kind_info kKda = {
    attn_kind::KDA,
    "kda",
    param_group::KDA,
    [](const model_config&) { return "KDA"; },
    [](arch::manifest_builder& b, const std::string& p, int64_t layer, param_group g) {
      b.kda_block(p, layer, g);
    },
    [](weight_loader& ld, const std::string& p) -> std::unique_ptr<attention_layer> {
      return std::make_unique<kda_layer>(load_kda(ld, p));
    },
    [](const model_config& c) {
      return 3 * kda_conv_floats(c) + c.kda->num_heads * c.kda->head_dim * c.kda->head_dim;
    },
    &kda_plan,
    &kda_work,
    /*work_held=*/true,
};

// ---- MLA / Gated DSA: per-token latent rows (and indexer keys) ----

class mla_layer final : public attention_layer {
 public:
  explicit mla_layer(mla_weights w) : w_(std::move(w)) {}
  void forward_batch(const model_config& c, const float* x, int64_t R, std::span<const seq_rows> segs,
                     int64_t slot, float* out, const dump_sink* dump,
                     const std::string& name) const override {
    mla_forward_batch(w_, c, x, R, segs, slot, out, dump, name);
  }

 private:
  mla_weights w_;
};

attention_plan_figures mla_plan(const model_config& c, cache_format cache, int64_t context, int) {
  const auto& m = *c.mla;
  attention_plan_figures f;
  // The DSA index key's bytes per token: FP8 codes and an fp32 scale in every cache format, as the engine
  // keeps them (kernels/ref/dsa.h; DeepSeek-V3.2's 132 B per 128-dim key).
  const uint64_t key = c.dsa ? uint64_t(kernels::ref::index_key_bytes(c.dsa->index_head_dim)) : 0;
  if (cache != cache_format::FP8) {
    const uint64_t e = cache == cache_format::F32 ? 4 : 2;
    f.token_bytes = uint64_t(m.kv_lora_rank + m.qk_rope_head_dim) * e;
  } else {
    // FlashMLA-style FP8 latent (512 B + 4 fp32 scales + 64 BF16 rope = 656 B).
    f.token_bytes = uint64_t(m.kv_lora_rank) + 4 * uint64_t((m.kv_lora_rank + 127) / 128) +
                    uint64_t(m.qk_rope_head_dim) * 2;
  }
  f.token_bytes += key;
  // DSA scans every index key, then reads the top-k latents; dense MLA reads every latent.
  const double ctx = double(context);
  if (c.dsa)
    f.decode_read_bytes = ctx * double(key) +
                          double(std::min<int64_t>(context, c.dsa->index_topk)) * double(f.token_bytes - key);
  else
    f.decode_read_bytes = ctx * double(f.token_bytes);
  f.tp_split = 1;  // the latent has no head dimension: replicated across tp ranks
  return f;
}

// mla_forward_batch's buffers per row: the stacked projections, c_Q, the queries, the new latent rows, the
// absorbed queries and outputs, the indexer's queries, keys, weights and picks, the output and its gate,
// and the RoPE tables; plus the indexer's score block (a query block's rows over the context, capped).
double mla_work(const model_config& c, int64_t rows, int64_t context, int tp) {
  const auto& m = *c.mla;
  const double H = double(m.num_heads) / tp, L = double(m.kv_lora_rank), Dr = double(m.qk_rope_head_dim);
  const double Dq = double(m.qk_nope_head_dim) + Dr, Wl = L + Dr, Dv = double(m.v_head_dim);
  const double rq = m.q_lora_rank ? double(*m.q_lora_rank) : 0.0;
  const double gate = m.output_gate ? H * Dv : 0.0;
  double in = (rq > 0 ? rq : H * Dq) + Wl + gate, per_row = rq + H * Dq + Wl + H * Wl + H * L + H * Dv + gate;
  if (!m.use_nope) per_row += Dr;
  double scores = 0;
  if (c.dsa) {
    const auto& d = *c.dsa;
    const double HI = double(d.index_n_heads), DI = double(d.index_head_dim);
    in += DI + HI;
    per_row += HI * DI + DI + HI + double(std::min<int64_t>(d.index_topk, context));
    const int64_t S = std::max<int64_t>(1, context);
    const int64_t qb = std::clamp<int64_t>(kIndexerScoreFloats / S, 1, kIndexerQueryBlock);
    scores = double(std::min(rows, qb)) * double(S);
  }
  return double(rows) * (in + per_row) + scores;
}

const attention_kind_info kMla = {
    attn_kind::MLA,
    "mla",
    param_group::MLA,
    [](const model_config& c) { return c.dsa ? "Gated DSA" : "MLA"; },
    [](arch::manifest_builder& b, const std::string& p, int64_t layer, param_group g) {
      b.mla_block(p, layer, g);
    },
    [](weight_loader& ld, const std::string& p) -> std::unique_ptr<attention_layer> {
      return std::make_unique<mla_layer>(load_mla(ld, p));
    },
    [](const model_config&) { return int64_t(0); },
    &mla_plan,
    &mla_work,
};

// ---- sliding-window attention: a ring of the last `window` keys and values ----

class swa_layer final : public attention_layer {
 public:
  explicit swa_layer(swa_weights w) : w_(std::move(w)) {}
  void forward_batch(const model_config& c, const float* x, int64_t R, std::span<const seq_rows> segs,
                     int64_t slot, float* out, const dump_sink* dump,
                     const std::string& name) const override {
    swa_forward_batch(w_, c, x, R, segs, slot, out, dump, name);
  }

 private:
  swa_weights w_;
};

attention_plan_figures swa_plan(const model_config& c, cache_format cache, int64_t context, int tp) {
  const auto& s = *c.swa;
  attention_plan_figures f;
  // BF16 (CPU: f32) keys and values of min(window, context) positions (the ring never grows past the
  // window); the FP8 cache format is FlashMLA's latent layout and does not apply here. Decode reads the
  // whole ring.
  f.state_bytes = uint64_t(std::min(s.window, context)) * uint64_t(2 * s.kv_dim()) * (cache == cache_format::F32 ? 4 : 2);
  f.decode_read_bytes = double(f.state_bytes);
  f.tp_split = s.num_kv_heads % tp == 0 ? tp : 1;  // KV heads split across ranks, else replicated
  return f;
}

// swa_forward_batch's buffers per row: the stacked q/k/v, q, k, v, the output and the RoPE tables; plus the
// gathered keys and values of the window before the rows.
double swa_work(const model_config& c, int64_t rows, int64_t context, int tp) {
  const auto& s = *c.swa;
  const int kv_split = s.num_kv_heads % tp == 0 ? tp : 1;
  const double Q = double(s.q_dim()) / tp, KV = double(s.kv_dim()) / kv_split, D = double(s.head_dim);
  const double before = double(std::min<int64_t>(s.window - 1, std::max<int64_t>(0, context - rows)));
  return double(rows) * (2 * (Q + 2 * KV) + Q + D) + 2 * KV * (before + double(rows));
}

const attention_kind_info kSwa = {
    attn_kind::SWA,
    "swa",
    param_group::SWA,
    [](const model_config&) { return "SWA"; },
    [](arch::manifest_builder& b, const std::string& p, int64_t layer, param_group g) {
      b.swa_block(p, layer, g);
    },
    [](weight_loader& ld, const std::string& p) -> std::unique_ptr<attention_layer> {
      return std::make_unique<swa_layer>(load_swa(ld, p));
    },
    [](const model_config& c) { return swa_state_floats(*c.swa); },
    &swa_plan,
    &swa_work,
};

}  // namespace

const attention_kind_info& attention_kind(formats::attn_kind kind) {
  switch (kind) {
    case attn_kind::KDA:
      return kKda;
    case attn_kind::MLA:
      return kMla;
    case attn_kind::SWA:
      return kSwa;
  }
  throw error("unknown attention kind " + std::to_string(int(kind)));
}

}  // namespace moxi::model
