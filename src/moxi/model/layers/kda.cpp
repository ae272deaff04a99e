// KDA forward: projections, short convs with state, L2 norm, decay gate (softplus or lower-bound form),
// beta, chunked or recurrent core, sigmoid-gated per-head RMSNorm, o_proj. Matches HF modeling_kimi.py /
// vLLM kda.py as summarized in docs/kimi-linear.md §1.2.
#include "moxi/model/layers/kda.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/kernels/kda-dispatch.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/kda.h"

namespace moxi::model {

namespace ref = kernels::ref;

namespace {

// KDA core work per thread below which one thread runs every recurrence of the call, in state elements
// touched (T * heads * D^2), the chunked prefill (one scalar exp per score element) weighted kChunkedCost
// times the decode step (docs/kernels-mxfp4.md "Thread-pool thresholds").
constexpr int64_t kKdaMinWorkPerThread = int64_t(1) << 17;
constexpr int64_t kChunkedCost = 8;

// The inputs of the KDA cores of one call, rows of all sequences, D = K = V.
struct core_inputs {
  const float *q, *k, *v, *g, *beta;  // f32 [R, H, D] (beta [R, H])
  float scale;
  float* o;  // f32 [R, H, D]
  int64_t H, D;
};

// Heads [h0, h1) of one sequence (rows [r0, r0 + T)) through the kernel for its length: the recurrent step
// (fast twin when enabled) for T = 1, the chunked prefill otherwise. All heads run in place; a subset is
// gathered into [T, h, D] slices and scattered back. Heads are independent (own state and inputs), so any
// split is bit-identical to one call over all heads.
void core_heads(const core_inputs& a, int64_t r0, int64_t T, float* state, int64_t h0, int64_t h1) {
  const int64_t H = a.H, D = a.D, h = h1 - h0;
  const auto core = T == 1 ? &kernels::kda_recurrent : &kernels::kda_chunked;
  const int64_t x0 = r0 * H * D;
  if (h == H) {
    core(a.q + x0, a.k + x0, a.v + x0, a.g + x0, a.beta + r0 * H, a.scale, state, a.o + x0, T, H, D, D);
    return;
  }
  const size_t row = size_t(h * D) * sizeof(float);
  std::vector<float> qs(size_t(T * h * D)), ks(qs.size()), vs(qs.size()), gs(qs.size()), os(qs.size());
  std::vector<float> bs(size_t(T * h));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t src = x0 + (t * H + h0) * D, dst = t * h * D;
    std::memcpy(qs.data() + dst, a.q + src, row);
    std::memcpy(ks.data() + dst, a.k + src, row);
    std::memcpy(vs.data() + dst, a.v + src, row);
    std::memcpy(gs.data() + dst, a.g + src, row);
    std::memcpy(bs.data() + t * h, a.beta + (r0 + t) * H + h0, size_t(h) * sizeof(float));
  }
  core(qs.data(), ks.data(), vs.data(), gs.data(), bs.data(), a.scale, state + h0 * D * D, os.data(), T, h, D,
       D);
  for (int64_t t = 0; t < T; ++t) std::memcpy(a.o + x0 + (t * H + h0) * D, os.data() + t * h * D, row);
}

// Every sequence's KDA core in ONE pool job: the (sequence, head) pairs, in order, are split statically
// over the threads balanced by cost, each thread running its heads of each sequence as one core call.
// Below the work threshold the calling thread runs each sequence whole.
void run_cores(const core_inputs& a, std::span<const seq_rows> segs, std::span<const kda_state_ref> states) {
  const int64_t H = a.H, D = a.D;
  std::vector<int64_t> cum(segs.size() * size_t(H) + 1, 0);  // cumulative cost of the (sequence, head) pairs
  for (size_t i = 0; i < segs.size(); ++i)
    for (int64_t h = 0; h < H; ++h) {
      const size_t j = i * size_t(H) + size_t(h);
      cum[j + 1] = cum[j] + segs[i].T * D * D * (segs[i].T == 1 ? 1 : kChunkedCost);
    }
  const int64_t total = cum.back();
  thread_pool::global().run_if(total, kKdaMinWorkPerThread, [&](int tid, int nt) {
    // Pair j belongs to the thread whose share [tid, tid + 1) * total / nt holds its cost midpoint.
    auto owner = [&](size_t j) {
      return std::min<int64_t>(nt - 1, (cum[j] + cum[j + 1]) * nt / (2 * total));
    };
    for (size_t i = 0; i < segs.size(); ++i) {
      int64_t h0 = -1;
      for (int64_t h = 0; h <= H; ++h) {
        const bool mine = h < H && owner(i * size_t(H) + size_t(h)) == tid;
        if (mine && h0 < 0) h0 = h;
        if (!mine && h0 >= 0) {
          core_heads(a, segs[i].begin, segs[i].T, states[i].recurrent, h0, h);
          h0 = -1;
        }
      }
    }
  });
}

}  // namespace

kda_weights load_kda(weight_loader& ld, const std::string& p) {
  const auto& c = ld.config();
  const auto& k = *c.kda;
  const int64_t h = c.hidden_size, P = k.proj_dim(), D = k.head_dim, H = k.num_heads, W = k.conv_kernel;
  kda_weights w;
  linear qp = ld.lin(p + ".q_proj", P, h), kp = ld.lin(p + ".k_proj", P, h), vp = ld.lin(p + ".v_proj", P, h);
  w.q_conv = ld.f32(p + ".q_conv1d.weight", {P, 1, W});
  w.k_conv = ld.f32(p + ".k_conv1d.weight", {P, 1, W});
  w.v_conv = ld.f32(p + ".v_conv1d.weight", {P, 1, W});
  linear f_a = ld.lin(p + ".f_a_proj", D, h);
  w.f_b = ld.lin(p + ".f_b_proj", P, D);
  linear b = ld.lin(p + ".b_proj", H, h);
  w.A_log = ld.f32(p + ".A_log", {1, 1, H, 1});
  w.dt_bias = ld.f32(p + ".dt_bias", {P});
  linear gate;
  if (k.full_rank_output_gate) {
    gate = ld.lin(p + ".g_proj", P, h);
  } else {
    gate = ld.lin(p + ".g_a_proj", D, h);
    w.g_b = ld.lin(p + ".g_b_proj", P, D);
  }
  w.o_norm = ld.f32(p + ".o_norm.weight", {D});
  w.o_proj = ld.lin(p + ".o_proj", h, P);
  w.in_proj = stacked_linear::stack({&qp, &kp, &vp, &f_a, &b, &gate});
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
  // Every projection of x in one GEMV: f32 [R, in_proj.all.out].
  std::vector<float> xin(size_t(R * w.in_proj.all.out));
  w.in_proj.apply(x, xin.data(), R);
  std::vector<float> proj(size_t(R * P));                                    // f32 [R, P] before the conv
  std::vector<float> q(size_t(R * P)), kk(size_t(R * P)), v(size_t(R * P));  // f32 [R, H, D]
  auto conv = [&](kda_in part, const std::vector<float>& cw, float* kda_state_ref::*st,
                  std::vector<float>& y) {
    w.in_proj.extract(xin.data(), R, part, proj.data());
    for (size_t i = 0; i < segs.size(); ++i)
      ref::causal_conv1d_silu(proj.data() + segs[i].begin * P, cw.data(), states[i].*st,
                              y.data() + segs[i].begin * P, segs[i].T, P, W);
  };
  conv(KDA_Q, w.q_conv, &kda_state_ref::conv_q, q);
  conv(KDA_K, w.k_conv, &kda_state_ref::conv_k, kk);
  conv(KDA_V, w.v_conv, &kda_state_ref::conv_v, v);
  ref::l2norm(q.data(), q.data(), R * H, D);
  ref::l2norm(kk.data(), kk.data(), R * H, D);

  // Decay gate g f32 [R, H, D] in log space from the low-rank f_b(f_a(x)).
  std::vector<float> fa(size_t(R * D)), g(size_t(R * P));
  w.in_proj.extract(xin.data(), R, KDA_F_A, fa.data());
  w.f_b.apply(fa.data(), g.data(), R);
  if (k.gate == formats::kda_gate_kind::LOWER_BOUND)
    ref::kda_gate_lower_bound(g.data(), w.A_log.data(), w.dt_bias.data(), float(k.gate_lower_bound), g.data(),
                              R, H, D);
  else
    ref::kda_gate_softplus(g.data(), w.A_log.data(), w.dt_bias.data(), g.data(), R, H, D);
  std::vector<float> beta(size_t(R * H));  // f32 [R, H]
  w.in_proj.extract(xin.data(), R, KDA_BETA, beta.data());
  ref::sigmoid(beta.data(), beta.data(), R * H);

  dump(dump_to, name + ".q", {R, H, D}, q.data());
  dump(dump_to, name + ".k", {R, H, D}, kk.data());
  dump(dump_to, name + ".v", {R, H, D}, v.data());
  dump(dump_to, name + ".g", {R, H, D}, g.data());
  dump(dump_to, name + ".beta", {R, H}, beta.data());

  std::vector<float> o(size_t(R * P));  // f32 [R, H, D]
  const core_inputs in{q.data(), kk.data(), v.data(), g.data(), beta.data(), 1.0f / std::sqrt(float(D)),
                       o.data(), H,         D};
  if (kernels::fast_kernels()) {
    run_cores(in, segs, states);
  } else {
    for (size_t i = 0; i < segs.size(); ++i)
      core_heads(in, segs[i].begin, segs[i].T, states[i].recurrent, 0, H);
  }
  dump(dump_to, name + ".core", {R, H, D}, o.data());

  std::vector<float> gate(size_t(R * P));  // f32 [R, P] output gate logits
  if (k.full_rank_output_gate) {
    w.in_proj.extract(xin.data(), R, KDA_GATE, gate.data());
  } else {
    std::vector<float> ga(size_t(R * D));
    w.in_proj.extract(xin.data(), R, KDA_GATE, ga.data());
    w.g_b.apply(ga.data(), gate.data(), R);
  }
  ref::gated_rms_norm(o.data(), gate.data(), w.o_norm.data(), o.data(), R * H, D, float(c.rms_norm_eps));
  dump(dump_to, name + ".gated", {R, H, D}, o.data());
  w.o_proj.apply(o.data(), out, R);
}

}  // namespace moxi::model
