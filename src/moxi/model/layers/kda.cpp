// KDA forward: projections, short convs with state, L2 norm, decay gate (softplus or lower-bound form),
// beta, chunked or recurrent core, sigmoid-gated per-head RMSNorm, o_proj. Matches HF modeling_kimi.py /
// vLLM kda.py as summarized in docs/kimi-linear.md §1.2.
#include "moxi/model/layers/kda.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/scratch.h"

namespace moxi::model {
namespace {

// kda_forward_batch's per-thread buffers (kda_work in attention.cpp counts the same ones for the planner).
struct kda_buffers {
  std::vector<float> xin, proj, q, k, v, fa, g, beta, o, gate, ga;
  size_t bytes() const {
    size_t n = 0;
    for (const auto* b : {&xin, &proj, &q, &k, &v, &fa, &g, &beta, &o, &gate, &ga}) n += b->capacity();
    return n * sizeof(float);
  }
};
}  // namespace

kda_weights load_kda(weight_loader& ld, const std::string& p) {
  const auto& c = ld.config();
  const auto& k = *c.kda;
  const int64_t h = c.hidden_size, P = k.proj_dim(), D = k.head_dim, H = k.num_heads, W = k.conv_kernel;
  kda_weights w;
  linear qp = ld.lin(p + ".q_proj", P, h), kp = ld.lin(p + ".k_proj", P, h), vp = ld.lin(p + ".v_proj", P, h);
  // The kernels take the convolution weights tap-major, [W, P] (ref::causal_conv1d_silu).
  auto conv_weights = [&](const std::string& name) {
    const std::vector<float> cw = ld.f32(p + name, {P, 1, W});
    std::vector<float> t(cw.size());
    for (int64_t ch = 0; ch < P; ++ch)
      for (int64_t j = 0; j < W; ++j) t[size_t(j * P + ch)] = cw[size_t(ch * W + j)];
    return t;
  };
  w.q_conv = conv_weights(".q_conv1d.weight");
  w.k_conv = conv_weights(".k_conv1d.weight");
  w.v_conv = conv_weights(".v_conv1d.weight");
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
                       const dump_sink* dump_to, const std::string& name, std::span<float* const> traces) {
  MOXI_ASSERT(segs.size() == states.size());
  MOXI_ASSERT(traces.empty() || traces.size() == segs.size());
  int64_t covered = 0;  // the segments tile [0, R): every buffer row below is written before it is read
  for (const auto& s : segs) {
    MOXI_ASSERT(s.begin == covered && s.T >= 0);
    covered += s.T;
  }
  MOXI_ASSERT(covered == R);
  const auto& k = *c.kda;
  const int64_t P = k.proj_dim(), D = k.head_dim, H = k.num_heads, W = k.conv_kernel;
  const kernels::backend& be = kernels::active();
  // A traced sequence's state after token t goes to trace(i) + t * state_n: [conv_q | conv_k | conv_v | S].
  const int64_t conv_n = (W - 1) * P, state_n = 3 * conv_n + H * D * D;
  auto trace = [&](size_t i) { return traces.empty() ? nullptr : traces[i]; };
  // This thread's buffers, grown to the largest call so far and never zero-filled (every element is
  // written before it is read): a prefill chunk then neither clears nor faults in ~12 fresh rows of
  // floats per token. A call past kernels::kKeepScratchBytes gives them back when it ends.
  thread_local kda_buffers buf;
  const size_t r = size_t(R);
  // Every projection of x in one GEMV: f32 [R, in_proj.all.out].
  float* xin = kernels::scratch(buf.xin, r * size_t(w.in_proj.all.out));
  w.in_proj.apply(x, xin, R);
  float* proj = kernels::scratch(buf.proj, r * size_t(P));  // f32 [R, P] before the conv
  float* q = kernels::scratch(buf.q, r * size_t(P));        // f32 [R, H, D]
  float* kk = kernels::scratch(buf.k, r * size_t(P));
  float* v = kernels::scratch(buf.v, r * size_t(P));
  auto conv = [&](kda_in part, const std::vector<float>& cw, float* kda_state_ref::*st, float* y) {
    w.in_proj.extract(xin, R, part, proj);
    for (size_t i = 0; i < segs.size(); ++i) {
      float* tr = trace(i);
      if (!tr) {
        be.causal_conv1d_silu(proj + segs[i].begin * P, cw.data(), states[i].*st, y + segs[i].begin * P,
                              segs[i].T, P, W);
        continue;
      }
      const int64_t at = (states[i].*st - states[i].conv_q);  // this conv's offset in the state
      for (int64_t t = 0; t < segs[i].T; ++t) {
        const int64_t row = segs[i].begin + t;
        be.causal_conv1d_silu(proj + row * P, cw.data(), states[i].*st, y + row * P, 1, P, W);
        std::memcpy(tr + t * state_n + at, states[i].*st, size_t(conv_n) * sizeof(float));
      }
    }
  };
  conv(KDA_Q, w.q_conv, &kda_state_ref::conv_q, q);
  conv(KDA_K, w.k_conv, &kda_state_ref::conv_k, kk);
  conv(KDA_V, w.v_conv, &kda_state_ref::conv_v, v);
  be.l2norm(q, q, R * H, D);
  be.l2norm(kk, kk, R * H, D);

  // Decay gate g f32 [R, H, D] in log space from the low-rank f_b(f_a(x)).
  float* fa = kernels::scratch(buf.fa, r * size_t(D));
  float* g = kernels::scratch(buf.g, r * size_t(P));
  w.in_proj.extract(xin, R, KDA_F_A, fa);
  w.f_b.apply(fa, g, R);
  if (k.gate == formats::kda_gate_kind::LOWER_BOUND)
    be.kda_gate_lower_bound(g, w.A_log.data(), w.dt_bias.data(), float(k.gate_lower_bound), g, R, H, D);
  else
    be.kda_gate_softplus(g, w.A_log.data(), w.dt_bias.data(), g, R, H, D);
  float* beta = kernels::scratch(buf.beta, r * size_t(H));  // f32 [R, H]
  w.in_proj.extract(xin, R, KDA_BETA, beta);
  be.sigmoid(beta, beta, R * H);

  dump(dump_to, name + ".q", {R, H, D}, q);
  dump(dump_to, name + ".k", {R, H, D}, kk);
  dump(dump_to, name + ".v", {R, H, D}, v);
  dump(dump_to, name + ".g", {R, H, D}, g);
  dump(dump_to, name + ".beta", {R, H}, beta);

  float* o = kernels::scratch(buf.o, r * size_t(P));  // f32 [R, H, D]
  std::vector<kernels::kda_seq> seqs;
  const float scale = 1.0f / std::sqrt(float(D));
  for (size_t i = 0; i < segs.size(); ++i) {
    float* tr = trace(i);
    if (!tr) {
      seqs.push_back({segs[i].begin, segs[i].T, states[i].recurrent});
      continue;
    }
    for (int64_t t = 0; t < segs[i].T; ++t) {  // the decode recurrence, one token at a time
      const kernels::kda_seq one[] = {{segs[i].begin + t, 1, states[i].recurrent}};
      be.kda_cores({q, kk, v, g, beta, scale, o, H, D, one});
      std::memcpy(tr + t * state_n + 3 * conv_n, states[i].recurrent, size_t(H * D * D) * sizeof(float));
    }
  }
  if (!seqs.empty())
    be.kda_cores({q, kk, v, g, beta, scale, o, H, D, seqs});
  dump(dump_to, name + ".core", {R, H, D}, o);

  float* gate = kernels::scratch(buf.gate, r * size_t(P));  // f32 [R, P] output gate logits
  if (k.full_rank_output_gate) {
    w.in_proj.extract(xin, R, KDA_GATE, gate);
  } else {
    float* ga = kernels::scratch(buf.ga, r * size_t(D));
    w.in_proj.extract(xin, R, KDA_GATE, ga);
    w.g_b.apply(ga, gate, R);
  }
  be.gated_rms_norm(o, gate, w.o_norm.data(), o, R * H, D, float(c.rms_norm_eps));
  dump(dump_to, name + ".gated", {R, H, D}, o);
  w.o_proj.apply(o, out, R);
  if (buf.bytes() > kernels::kKeepScratchBytes) buf = {};
}

}  // namespace moxi::model
