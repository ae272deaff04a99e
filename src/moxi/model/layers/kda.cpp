// KDA forward: projections, short convs with state, L2 norm, decay gate (softplus or lower-bound form),
// beta, chunked or recurrent core, sigmoid-gated per-head RMSNorm, o_proj. Matches HF modeling_kimi.py /
// vLLM kda.py as summarized in reference/kda.md §1.2.
#include "moxi/model/layers/kda.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/kda.h"

namespace moxi::model {

namespace ref = kernels::ref;

namespace {

// State multiply-adds (T * heads * D^2) per thread below which splitting heads over the pool costs more
// than it saves (docs/kernels-mxfp4.md "Thread-pool thresholds").
constexpr int64_t kKdaMinWorkPerThread = int64_t(1) << 15;

using kda_core_fn = void (*)(const float*, const float*, const float*, const float*, const float*, float,
                             float*, float*, int64_t, int64_t, int64_t, int64_t);

// The KDA core with heads split over the thread pool. Heads are independent (own state, own q/k/v/g/beta),
// so each thread gathers its heads' [T, h, *] slices, runs the same reference kernel on them and scatters o
// back: bit-identical to one call over all heads, about pool-size times faster (the core is most of a
// long prefill). Inputs as in ref::kda_chunked, D = K = V.
void kda_core_by_heads(kda_core_fn core, const float* q, const float* k, const float* v, const float* g,
                       const float* beta, float scale, float* state, float* o, int64_t T, int64_t H,
                       int64_t D) {
  thread_pool::global().run([&](int tid, int nt) {
    const range r = split_range(H, tid, nt);
    const int64_t h = r.end - r.begin;
    if (h == 0) return;
    const size_t row = size_t(h * D) * sizeof(float);
    std::vector<float> qs(size_t(T * h * D)), ks(qs.size()), vs(qs.size()), gs(qs.size()), os(qs.size());
    std::vector<float> bs(size_t(T * h));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t src = (t * H + r.begin) * D, dst = t * h * D;
      std::memcpy(qs.data() + dst, q + src, row);
      std::memcpy(ks.data() + dst, k + src, row);
      std::memcpy(vs.data() + dst, v + src, row);
      std::memcpy(gs.data() + dst, g + src, row);
      std::memcpy(bs.data() + t * h, beta + t * H + r.begin, size_t(h) * sizeof(float));
    }
    core(qs.data(), ks.data(), vs.data(), gs.data(), bs.data(), scale, state + r.begin * D * D, os.data(), T,
         h, D, D);
    for (int64_t t = 0; t < T; ++t) std::memcpy(o + (t * H + r.begin) * D, os.data() + t * h * D, row);
  });
}

}  // namespace

kda_weights load_kda(weight_loader& ld, const std::string& p) {
  const auto& c = ld.config();
  const auto& k = *c.kda;
  const int64_t h = c.hidden_size, P = k.proj_dim(), D = k.head_dim, H = k.num_heads, W = k.conv_kernel;
  kda_weights w;
  w.q_proj = ld.lin(p + ".q_proj", P, h);
  w.k_proj = ld.lin(p + ".k_proj", P, h);
  w.v_proj = ld.lin(p + ".v_proj", P, h);
  w.q_conv = ld.f32(p + ".q_conv1d.weight", {P, 1, W});
  w.k_conv = ld.f32(p + ".k_conv1d.weight", {P, 1, W});
  w.v_conv = ld.f32(p + ".v_conv1d.weight", {P, 1, W});
  w.f_a = ld.lin(p + ".f_a_proj", D, h);
  w.f_b = ld.lin(p + ".f_b_proj", P, D);
  w.b_proj = ld.lin(p + ".b_proj", H, h);
  w.A_log = ld.f32(p + ".A_log", {1, 1, H, 1});
  w.dt_bias = ld.f32(p + ".dt_bias", {P});
  if (k.full_rank_output_gate) {
    w.g_proj = ld.lin(p + ".g_proj", P, h);
  } else {
    w.g_a = ld.lin(p + ".g_a_proj", D, h);
    w.g_b = ld.lin(p + ".g_b_proj", P, D);
  }
  w.o_norm = ld.f32(p + ".o_norm.weight", {D});
  w.o_proj = ld.lin(p + ".o_proj", h, P);
  return w;
}

void kda_forward(const kda_weights& w, const formats::model_config& c, const float* x, int64_t T,
                 const kda_state_ref& state, float* out, const dump_sink* dump_to, const std::string& name) {
  const seq_rows seg{0, T, nullptr};
  kda_forward_batch(w, c, x, T, std::span(&seg, 1), std::span(&state, 1), out, dump_to, name);
}

void kda_forward_batch(const kda_weights& w, const formats::model_config& c, const float* x, int64_t R,
                       std::span<const seq_rows> segs, std::span<const kda_state_ref> states, float* out,
                       const dump_sink* dump_to, const std::string& name) {
  MOXI_ASSERT(segs.size() == states.size());
  const auto& k = *c.kda;
  const int64_t P = k.proj_dim(), D = k.head_dim, H = k.num_heads, W = k.conv_kernel;
  std::vector<float> proj(size_t(R * P));                                    // f32 [R, P] before the conv
  std::vector<float> q(size_t(R * P)), kk(size_t(R * P)), v(size_t(R * P));  // f32 [R, H, D]
  auto conv = [&](const linear& l, const std::vector<float>& cw, float* kda_state_ref::*st,
                  std::vector<float>& y) {
    l.apply(x, proj.data(), R);
    for (size_t i = 0; i < segs.size(); ++i)
      ref::causal_conv1d_silu(proj.data() + segs[i].begin * P, cw.data(), states[i].*st,
                              y.data() + segs[i].begin * P, segs[i].T, P, W);
  };
  conv(w.q_proj, w.q_conv, &kda_state_ref::conv_q, q);
  conv(w.k_proj, w.k_conv, &kda_state_ref::conv_k, kk);
  conv(w.v_proj, w.v_conv, &kda_state_ref::conv_v, v);
  ref::l2norm(q.data(), q.data(), R * H, D);
  ref::l2norm(kk.data(), kk.data(), R * H, D);

  // Decay gate g f32 [R, H, D] in log space from the low-rank f_b(f_a(x)).
  std::vector<float> fa(size_t(R * D)), g(size_t(R * P));
  w.f_a.apply(x, fa.data(), R);
  w.f_b.apply(fa.data(), g.data(), R);
  if (k.gate == formats::kda_gate_kind::LOWER_BOUND)
    ref::kda_gate_lower_bound(g.data(), w.A_log.data(), w.dt_bias.data(), float(k.gate_lower_bound), g.data(),
                              R, H, D);
  else
    ref::kda_gate_softplus(g.data(), w.A_log.data(), w.dt_bias.data(), g.data(), R, H, D);
  std::vector<float> beta(size_t(R * H));  // f32 [R, H]
  w.b_proj.apply(x, beta.data(), R);
  ref::sigmoid(beta.data(), beta.data(), R * H);

  dump(dump_to, name + ".q", {R, H, D}, q.data());
  dump(dump_to, name + ".k", {R, H, D}, kk.data());
  dump(dump_to, name + ".v", {R, H, D}, v.data());
  dump(dump_to, name + ".g", {R, H, D}, g.data());
  dump(dump_to, name + ".beta", {R, H}, beta.data());

  std::vector<float> o(size_t(R * P));  // f32 [R, H, D]
  const float scale = 1.0f / std::sqrt(float(D));
  for (size_t i = 0; i < segs.size(); ++i) {
    const int64_t T = segs[i].T, r0 = segs[i].begin;
    const float *qs = q.data() + r0 * P, *ks = kk.data() + r0 * P, *vs = v.data() + r0 * P;
    const float *gs = g.data() + r0 * P, *bs = beta.data() + r0 * H;
    float* os = o.data() + r0 * P;
    // Split only when each thread gets enough state updates (T * heads * D^2) to pay for the hand-off: a
    // tiny model's decode step (4 heads of 16) runs faster on one thread.
    if (kernels::fast_kernels() && H > 1 && T * H * D * D >= 2 * kKdaMinWorkPerThread)
      kda_core_by_heads(T == 1 ? &ref::kda_recurrent : &ref::kda_chunked, qs, ks, vs, gs, bs, scale,
                        states[i].recurrent, os, T, H, D);
    else if (T == 1)
      ref::kda_recurrent(qs, ks, vs, gs, bs, scale, states[i].recurrent, os, T, H, D, D);
    else
      ref::kda_chunked(qs, ks, vs, gs, bs, scale, states[i].recurrent, os, T, H, D, D);
  }
  dump(dump_to, name + ".core", {R, H, D}, o.data());

  std::vector<float> gate(size_t(R * P));  // f32 [R, P] output gate logits
  if (k.full_rank_output_gate) {
    w.g_proj.apply(x, gate.data(), R);
  } else {
    std::vector<float> ga(size_t(R * D));
    w.g_a.apply(x, ga.data(), R);
    w.g_b.apply(ga.data(), gate.data(), R);
  }
  ref::gated_rms_norm(o.data(), gate.data(), w.o_norm.data(), o.data(), R * H, D, float(c.rms_norm_eps));
  dump(dump_to, name + ".gated", {R, H, D}, o.data());
  w.o_proj.apply(o.data(), out, R);
}

}  // namespace moxi::model
