// Dense MLP and MoE forward. Routed experts run batched per expert in the kernel backend's moe_experts
// (gather the tokens routed to it, one GEMM each for w1/w3/w2 on the packed MXFP4 weights, scatter-add
// with the routing weight; a fast backend splits the experts of a layer over threads). The tests check it
// against a per-token dense loop.
#include "moxi/model/layers/ffn.h"

#include <algorithm>
#include <cstring>

#include "moxi/kernels/backend.h"

namespace moxi::model {

namespace ref = kernels::ref;

swiglu_mlp swiglu_mlp::make(linear gate, linear up, linear down) {
  return {stacked_linear::stack({&gate, &up}), std::move(down)};
}

void swiglu_mlp::apply(const float* x, float* y, int64_t T) const {
  const int64_t F = gate_up.width(0);
  std::vector<float> gu(size_t(T * 2 * F)), g(size_t(T * F)), u(size_t(T * F));  // f32 [T, 2F], [T, F]
  gate_up.apply(x, gu.data(), T);
  gate_up.extract(gu.data(), T, 0, g.data());
  gate_up.extract(gu.data(), T, 1, u.data());
  kernels::active().swiglu(g.data(), u.data(), g.data(), T * F);
  down.apply(g.data(), y, T);
}

swiglu_mlp load_dense_mlp(weight_loader& ld, const std::string& p) {
  const auto& c = ld.config();
  const int64_t h = c.hidden_size, f = c.dense_intermediate_size;
  return swiglu_mlp::make(ld.lin(p + ".gate_proj", f, h), ld.lin(p + ".up_proj", f, h),
                          ld.lin(p + ".down_proj", h, f));
}

moe_weights load_moe(weight_loader& ld, const std::string& p, const arch::ffn_names& n) {
  const auto& c = ld.config();
  const auto& m = c.moe;
  const int64_t h = c.hidden_size, E = m.num_experts, W = m.expert_width(h), F = m.intermediate_size;
  moe_weights w;
  w.router = ld.f32(p + ".gate.weight", {E, h});
  w.router_bias = ld.f32(p + ".gate.e_score_correction_bias", {E});
  w.route.n_experts = E;
  w.route.top_k = m.experts_per_token;
  w.route.n_group = m.num_groups;
  w.route.topk_group = m.topk_group;
  // HF Kimi and DeepSeek-V3 renormalize only when more than one expert is picked.
  w.route.renormalize = m.renormalize && m.experts_per_token > 1;
  w.route.routed_scaling_factor = float(m.routed_scaling_factor);
  w.route.scoring =
      m.score == formats::router_score::SIGMOID ? ref::RouterScoring::kSigmoid : ref::RouterScoring::kSoftmax;
  if (m.latent_size) {
    w.latent_down = ld.lin(p + ".latent_down_proj", W, h);
    if (m.latent_norm) w.latent_norm = ld.f32(p + ".latent_norm.weight", {W});
    w.latent_up = ld.lin(p + ".latent_up_proj", h, W);
  }
  w.experts.resize(size_t(E));
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = p + ".experts." + std::to_string(e) + ".";
    auto& ex = w.experts[size_t(e)];
    ex.gate = ld.expert(x + n.expert_gate + ".weight", F, W);
    ex.up = ld.expert(x + n.expert_up + ".weight", F, W);
    ex.down = ld.expert(x + n.expert_down + ".weight", W, F);
  }
  if (m.num_shared_experts > 0) {
    const std::string s = p + ".shared_experts";
    const int64_t fs = F * m.num_shared_experts;
    w.shared = swiglu_mlp::make(ld.lin(s + ".gate_proj", fs, h), ld.lin(s + ".up_proj", fs, h),
                                ld.lin(s + ".down_proj", h, fs));
  }
  w.expert_act = activation_quant(c);
  return w;
}

void moe_forward(const moe_weights& w, const formats::model_config& c, const float* x, int64_t T, float* out,
                 const dump_sink* dump_to, const std::string& name) {
  const int64_t h = c.hidden_size, E = w.route.n_experts, K = w.route.top_k;
  const int64_t W = c.moe.expert_width(h), F = c.moe.intermediate_size;
  const kernels::backend& be = kernels::active();

  // Router in fp32 on the full hidden state.
  std::vector<float> logits(size_t(T * E));  // f32 [T, E]
  be.matmul(x, w.router.data(), nullptr, logits.data(), T, E, h);
  std::vector<int32_t> sel(size_t(T * K));  // i32 [T, top_k]
  std::vector<float> wt(size_t(T * K));     // f32 [T, top_k]
  be.moe_route(logits.data(), w.router_bias.data(), w.route, sel.data(), wt.data(), T);
  if (dump_to && dump_to->wants(name + ".experts")) {
    std::vector<float> f(sel.begin(), sel.end());
    dump_to->put(name + ".experts", {T, K}, f.data());
  }
  dump(dump_to, name + ".weights", {T, K}, wt.data());

  // Expert inputs f32 [T, W]: the latent projection (with its RMSNorm) or the hidden state itself.
  std::vector<float> xl;
  const float* xe = x;
  if (!w.latent_down.empty()) {
    xl.resize(size_t(T * W));
    w.latent_down.apply(x, xl.data(), T);
    if (!w.latent_norm.empty())
      be.rms_norm(xl.data(), w.latent_norm.data(), xl.data(), T, W, float(c.rms_norm_eps));
    xe = xl.data();
  }

  // Tokens per expert, in token order; the backend runs the experts that have any and sums their weighted
  // outputs into acc f32 [T, W].
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j)
      routed[size_t(sel[size_t(t * K + j)])].push_back({t, wt[size_t(t * K + j)]});
  std::vector<float> acc(size_t(T * W));
  be.moe_experts({xe, T, W, F, w.experts, &routed, w.expert_act, acc.data()});
  if (!w.latent_up.empty())
    w.latent_up.apply(acc.data(), out, T);
  else
    std::memcpy(out, acc.data(), size_t(T * h) * sizeof(float));
  dump(dump_to, name + ".routed", {T, h}, out);

  if (w.shared) {
    std::vector<float> s(size_t(T * h));  // f32 [T, hidden], added unscaled
    w.shared->apply(x, s.data(), T);
    dump(dump_to, name + ".shared", {T, h}, s.data());
    for (int64_t i = 0; i < T * h; ++i) out[i] += s[size_t(i)];
  }
}

}  // namespace moxi::model
