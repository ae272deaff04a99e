// Sliding-window attention forward over the kernel backend (kernels/backend.h, swa_attention) and the ring
// buffer cache: per sequence, the ring's still-visible rows and the chunk's new keys are laid out in
// position order and attended with the window mask; then the newest rows go back into the ring.
#include "moxi/model/layers/swa.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moxi/base/error.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/model/layers/rope.h"

namespace moxi::model {

namespace ref = kernels::ref;

namespace {

enum swa_in : size_t { SWA_Q, SWA_K, SWA_V };

}  // namespace

swa_weights load_swa(weight_loader& ld, const std::string& p) {
  const auto& c = ld.config();
  const auto& s = *c.swa;
  const int64_t h = c.hidden_size, D = s.head_dim;
  swa_weights w;
  linear q = ld.lin(p + ".q_proj", s.q_dim(), h);
  linear k = ld.lin(p + ".k_proj", s.kv_dim(), h);
  linear v = ld.lin(p + ".v_proj", s.kv_dim(), h);
  w.qkv = stacked_linear::stack({&q, &k, &v});
  w.o_proj = ld.lin(p + ".o_proj", h, s.q_dim());
  const auto yarn = yarn_of(c.rope);
  w.inv_freq.resize(size_t(D / 2));
  ref::rope_inv_freq(yarn, D, w.inv_freq.data());
  w.rope_attention_factor = ref::yarn_attention_factor(yarn);
  const double mscale = ref::yarn_softmax_mscale(yarn);
  w.softmax_scale = float(1.0 / std::sqrt(double(D)) * mscale * mscale);
  return w;
}

int64_t swa_state_floats(const formats::swa_config& s) {
  return 2 * s.window * s.kv_dim();
}

swa_ring_ref swa_ring(float* state, const formats::swa_config& s) {
  return {state, state + s.window * s.kv_dim()};
}

void swa_forward_batch(const swa_weights& w, const formats::model_config& c, const float* x, int64_t R,
                       std::span<const seq_rows> segs, int64_t layer, float* out, const dump_sink* dump_to,
                       const std::string& name) {
  const auto& s = *c.swa;
  const int64_t H = s.num_heads, KVH = s.num_kv_heads, D = s.head_dim, W = s.window;
  const int64_t Q = s.q_dim(), KV = s.kv_dim();

  std::vector<float> xin(size_t(R * w.qkv.all.out));
  w.qkv.apply(x, xin.data(), R);
  std::vector<float> q(size_t(R * Q)), k(size_t(R * KV)), v(size_t(R * KV));
  w.qkv.extract(xin.data(), R, SWA_Q, q.data());
  w.qkv.extract(xin.data(), R, SWA_K, k.data());
  w.qkv.extract(xin.data(), R, SWA_V, v.data());

  const kernels::backend& be = kernels::active();
  std::vector<float> o(size_t(R * Q));  // f32 [R, H*D]
  std::vector<float> keys, values, cos, sin;
  std::vector<int64_t> pos;
  for (const auto& sg : segs) {
    const int64_t T = sg.T, r0 = sg.begin, S0 = sg.cache->length();
    // RoPE at the sequence's positions S0 ... S0+T-1 (half-split, HF rotate_half).
    pos.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = S0 + t;
    cos.resize(size_t(T * D / 2));
    sin.resize(size_t(T * D / 2));
    be.rope_cos_sin(pos.data(), w.inv_freq.data(), w.rope_attention_factor, cos.data(), sin.data(), T, D);
    be.rope_apply(q.data() + r0 * Q, cos.data(), sin.data(), T, H, Q, D, D, ref::RopeLayout::kHalfSplit);
    be.rope_apply(k.data() + r0 * KV, cos.data(), sin.data(), T, KVH, KV, D, D, ref::RopeLayout::kHalfSplit);

    // Keys and values in position order: the P cached positions the first query still sees (the last
    // window-1), then the chunk's T.
    const swa_ring_ref ring = swa_ring(sg.cache->state(layer), s);
    const int64_t P = std::min(S0, W - 1), S = P + T;
    keys.resize(size_t(S * KV));
    values.resize(size_t(S * KV));
    for (int64_t j = 0; j < P; ++j) {
      const int64_t row = (S0 - P + j) % W;
      std::memcpy(keys.data() + j * KV, ring.k + row * KV, size_t(KV) * sizeof(float));
      std::memcpy(values.data() + j * KV, ring.v + row * KV, size_t(KV) * sizeof(float));
    }
    std::memcpy(keys.data() + P * KV, k.data() + r0 * KV, size_t(T * KV) * sizeof(float));
    std::memcpy(values.data() + P * KV, v.data() + r0 * KV, size_t(T * KV) * sizeof(float));
    be.sliding_window_attention(q.data() + r0 * Q, keys.data(), values.data(), o.data() + r0 * Q, T, S, H,
                                KVH, D, W, w.softmax_scale);
    // The chunk's last (at most W) positions into the ring; under a speculative trace every position, and
    // the ring after each is recorded (the state is [k ring | v ring]).
    float* trace = sg.cache->state_trace(layer, T);
    for (int64_t t = trace ? 0 : std::max<int64_t>(0, T - W); t < T; ++t) {
      const int64_t row = (S0 + t) % W;
      std::memcpy(ring.k + row * KV, k.data() + (r0 + t) * KV, size_t(KV) * sizeof(float));
      std::memcpy(ring.v + row * KV, v.data() + (r0 + t) * KV, size_t(KV) * sizeof(float));
      if (trace) std::memcpy(trace + t * 2 * W * KV, ring.k, size_t(2 * W * KV) * sizeof(float));
    }
  }
  dump(dump_to, name + ".q", {R, H, D}, q.data());
  dump(dump_to, name + ".o", {R, H, D}, o.data());
  w.o_proj.apply(o.data(), out, R);
}

}  // namespace moxi::model
