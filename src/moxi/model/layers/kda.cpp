// KDA forward: projections, short convs with state, L2 norm, decay gate (softplus or lower-bound form),
// beta, chunked or recurrent core, sigmoid-gated per-head RMSNorm, o_proj. Matches HF modeling_kimi.py /
// vLLM kda.py as summarized in docs/kimi-linear.md §1.2.
#include "moxi/model/layers/kda.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/kernels/backend.h"

namespace moxi::model {

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
                       const dump_sink* dump_to, const std::string& name, std::span<float* const> traces) {
  MOXI_ASSERT(segs.size() == states.size());
  MOXI_ASSERT(traces.empty() || traces.size() == segs.size());
  const auto& k = *c.kda;
  const int64_t P = k.proj_dim(), D = k.head_dim, H = k.num_heads, W = k.conv_kernel;
  const kernels::backend& be = kernels::active();
  // A traced sequence's state after token t goes to trace(i) + t * state_n: [conv_q | conv_k | conv_v | S].
  const int64_t conv_n = (W - 1) * P, state_n = 3 * conv_n + H * D * D;
  auto trace = [&](size_t i) { return traces.empty() ? nullptr : traces[i]; };
  // Every projection of x in one GEMV: f32 [R, in_proj.all.out].
  std::vector<float> xin(size_t(R * w.in_proj.all.out));
  w.in_proj.apply(x, xin.data(), R);
  std::vector<float> proj(size_t(R * P));                                    // f32 [R, P] before the conv
  std::vector<float> q(size_t(R * P)), kk(size_t(R * P)), v(size_t(R * P));  // f32 [R, H, D]
  auto conv = [&](kda_in part, const std::vector<float>& cw, float* kda_state_ref::*st,
                  std::vector<float>& y) {
    w.in_proj.extract(xin.data(), R, part, proj.data());
    for (size_t i = 0; i < segs.size(); ++i) {
      float* tr = trace(i);
      if (!tr) {
        be.causal_conv1d_silu(proj.data() + segs[i].begin * P, cw.data(), states[i].*st,
                              y.data() + segs[i].begin * P, segs[i].T, P, W);
        continue;
      }
      const int64_t at = (states[i].*st - states[i].conv_q);  // this conv's offset in the state
      for (int64_t t = 0; t < segs[i].T; ++t) {
        const int64_t row = segs[i].begin + t;
        be.causal_conv1d_silu(proj.data() + row * P, cw.data(), states[i].*st, y.data() + row * P, 1, P, W);
        std::memcpy(tr + t * state_n + at, states[i].*st, size_t(conv_n) * sizeof(float));
      }
    }
  };
  conv(KDA_Q, w.q_conv, &kda_state_ref::conv_q, q);
  conv(KDA_K, w.k_conv, &kda_state_ref::conv_k, kk);
  conv(KDA_V, w.v_conv, &kda_state_ref::conv_v, v);
  be.l2norm(q.data(), q.data(), R * H, D);
  be.l2norm(kk.data(), kk.data(), R * H, D);

  // Decay gate g f32 [R, H, D] in log space from the low-rank f_b(f_a(x)).
  std::vector<float> fa(size_t(R * D)), g(size_t(R * P));
  w.in_proj.extract(xin.data(), R, KDA_F_A, fa.data());
  w.f_b.apply(fa.data(), g.data(), R);
  if (k.gate == formats::kda_gate_kind::LOWER_BOUND)
    be.kda_gate_lower_bound(g.data(), w.A_log.data(), w.dt_bias.data(), float(k.gate_lower_bound), g.data(),
                            R, H, D);
  else
    be.kda_gate_softplus(g.data(), w.A_log.data(), w.dt_bias.data(), g.data(), R, H, D);
  std::vector<float> beta(size_t(R * H));  // f32 [R, H]
  w.in_proj.extract(xin.data(), R, KDA_BETA, beta.data());
  be.sigmoid(beta.data(), beta.data(), R * H);

  dump(dump_to, name + ".q", {R, H, D}, q.data());
  dump(dump_to, name + ".k", {R, H, D}, kk.data());
  dump(dump_to, name + ".v", {R, H, D}, v.data());
  dump(dump_to, name + ".g", {R, H, D}, g.data());
  dump(dump_to, name + ".beta", {R, H}, beta.data());

  std::vector<float> o(size_t(R * P));  // f32 [R, H, D]
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
      be.kda_cores({q.data(), kk.data(), v.data(), g.data(), beta.data(), scale, o.data(), H, D, one});
      std::memcpy(tr + t * state_n + 3 * conv_n, states[i].recurrent, size_t(H * D * D) * sizeof(float));
    }
  }
  if (!seqs.empty())
    be.kda_cores({q.data(), kk.data(), v.data(), g.data(), beta.data(), scale, o.data(), H, D, seqs});
  dump(dump_to, name + ".core", {R, H, D}, o.data());

  std::vector<float> gate(size_t(R * P));  // f32 [R, P] output gate logits
  if (k.full_rank_output_gate) {
    w.in_proj.extract(xin.data(), R, KDA_GATE, gate.data());
  } else {
    std::vector<float> ga(size_t(R * D));
    w.in_proj.extract(xin.data(), R, KDA_GATE, ga.data());
    w.g_b.apply(ga.data(), gate.data(), R);
  }
  be.gated_rms_norm(o.data(), gate.data(), w.o_norm.data(), o.data(), R * H, D, float(c.rms_norm_eps));
  dump(dump_to, name + ".gated", {R, H, D}, o.data());
  w.o_proj.apply(o.data(), out, R);
}

}  // namespace moxi::model
