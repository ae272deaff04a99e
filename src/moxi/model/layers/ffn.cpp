// Dense MLP and MoE forward. Routed experts run batched per expert in the kernel backend's moe_experts
// (gather the tokens routed to it, one GEMM each for w1/w3/w2 on the packed MXFP4 weights, scatter-add
// with the routing weight; a fast backend splits the experts of a layer over threads). The tests check it
// against a per-token dense loop.
#include "moxi/model/layers/ffn.h"

#include <algorithm>
#include <cstring>

#include "moxi/base/error.h"
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
  // This rank's experts only (expert parallelism); all of them in one process.
  const auto [first, count] = ld.experts(E);
  w.first_expert = first;
  w.experts.resize(size_t(count));
  for (int64_t i = 0; i < count; ++i) {
    const std::string x = p + ".experts." + std::to_string(first + i) + ".";
    auto& ex = w.experts[size_t(i)];
    ex.gate = ld.expert(x + n.expert_gate + ".weight", F, W);
    ex.up = ld.expert(x + n.expert_up + ".weight", F, W);
    ex.down = ld.expert(x + n.expert_down + ".weight", W, F);
  }
  if (m.num_shared_experts > 0) {
    const std::string s = p + ".shared_experts";
    const int64_t fs = F * m.num_shared_experts / ld.tp();  // this rank's columns under tensor parallelism
    w.shared = swiglu_mlp::make(ld.lin(s + ".gate_proj", fs, h), ld.lin(s + ".up_proj", fs, h),
                                ld.lin(s + ".down_proj", h, fs));
  }
  w.expert_act = activation_quant(c);
  w.parallel = ld.options().parallel;
  return w;
}

namespace {

// Routes rows x f32 [T, hidden]: expert ids sel i32 [T, top_k] and weights wt f32 [T, top_k].
void route(const moe_weights& w, const float* x, int64_t T, int64_t h, std::vector<int32_t>& sel,
           std::vector<float>& wt) {
  const int64_t E = w.route.n_experts, K = w.route.top_k;
  const kernels::backend& be = kernels::active();
  std::vector<float> logits(size_t(T * E));  // f32 [T, E], the router in fp32 on the full hidden state
  be.matmul(x, w.router.data(), nullptr, logits.data(), T, E, h);
  sel.resize(size_t(T * K));
  wt.resize(size_t(T * K));
  be.moe_route(logits.data(), w.router_bias.data(), w.route, sel.data(), wt.data(), T);
}

// Expert inputs f32 [T, W]: the latent projection (with its RMSNorm) into xl, or the hidden state itself.
const float* expert_inputs(const moe_weights& w, const formats::model_config& c, const float* x, int64_t T,
                           std::vector<float>& xl) {
  if (w.latent_down.empty()) return x;
  const int64_t W = c.moe.expert_width(c.hidden_size);
  xl.resize(size_t(T * W));
  w.latent_down.apply(x, xl.data(), T);
  if (!w.latent_norm.empty())
    kernels::active().rms_norm(xl.data(), w.latent_norm.data(), xl.data(), T, W, float(c.rms_norm_eps));
  return xl.data();
}

// acc f32 [T, W] (latent) -> out f32 [T, hidden].
void expert_outputs(const moe_weights& w, const formats::model_config& c, const float* acc, int64_t T,
                    float* out) {
  if (!w.latent_up.empty())
    w.latent_up.apply(acc, out, T);
  else
    std::memcpy(out, acc, size_t(T * c.hidden_size) * sizeof(float));
}

// The routed experts with every expert in this process: rows of x f32 [T, hidden] -> out f32 [T, hidden].
void routed_local(const moe_weights& w, const formats::model_config& c, const float* x, int64_t T, float* out,
                  const dump_sink* dump_to, const std::string& name) {
  const int64_t h = c.hidden_size, E = w.route.n_experts, K = w.route.top_k;
  const int64_t W = c.moe.expert_width(h), F = c.moe.intermediate_size;
  std::vector<int32_t> sel;
  std::vector<float> wt;
  route(w, x, T, h, sel, wt);
  if (dump_to && dump_to->wants(name + ".experts")) {
    std::vector<float> f(sel.begin(), sel.end());
    dump_to->put(name + ".experts", {T, K}, f.data());
  }
  dump(dump_to, name + ".weights", {T, K}, wt.data());
  std::vector<float> xl;
  const float* xe = expert_inputs(w, c, x, T, xl);
  // Tokens per expert, in token order; the backend runs the experts that have any and sums their weighted
  // outputs into acc f32 [T, W].
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j)
      routed[size_t(sel[size_t(t * K + j)])].push_back({t, wt[size_t(t * K + j)]});
  std::vector<float> acc(size_t(T * W));
  kernels::active().moe_experts({xe, T, W, F, w.experts, &routed, w.expert_act, acc.data()});
  expert_outputs(w, c, acc.data(), T, out);
}

// Expert parallelism over the ep group (every member holds the same rows x f32 [T, hidden]; member r holds
// experts [r E/n, (r+1) E/n)). Member r routes its share of the rows, rows [T r/n, T (r+1)/n), and sends
// each of them once to every member that holds one of its experts, with those experts and their weights
// (all-to-all: counts first, then the records). A member runs its experts on the rows it receives and sends
// back each row's weighted sum (all-to-all again); the origin adds them up, and an all-gather gives every
// member all T finished rows. No row is dropped: buffers take whatever the routing sends.
void routed_ep(const moe_weights& w, const formats::model_config& c, const process_group& g, const float* x,
               int64_t T, float* out) {
  const int64_t h = c.hidden_size, K = w.route.top_k, W = c.moe.expert_width(h), F = c.moe.intermediate_size;
  const int n = g.size(), me = g.rank();
  const int64_t per_rank = int64_t(w.experts.size());
  auto first_row = [&](int r) { return T * r / n; };
  const int64_t r0 = first_row(me), Tm = first_row(me + 1) - r0;

  std::vector<int32_t> sel;
  std::vector<float> wt;
  route(w, x + r0 * h, Tm, h, sel, wt);
  std::vector<float> xl;
  const float* xe = expert_inputs(w, c, x + r0 * h, Tm, xl);

  // A record: K local expert ids (-1: none) as i32, their K weights, then the row's W inputs (all 4 bytes).
  const int64_t rec_words = 2 * K + W, rec_bytes = rec_words * 4;
  std::vector<std::vector<uint32_t>> to(static_cast<size_t>(n));
  std::vector<std::vector<int64_t>> rows_to(static_cast<size_t>(n));  // which of my rows each record carries
  std::vector<uint32_t> record(static_cast<size_t>(rec_words));  // reused for every (row, rank)
  for (int64_t t = 0; t < Tm; ++t) {
    for (int d = 0; d < n; ++d) {
      bool any = false;
      for (int64_t j = 0; j < K; ++j) {
        const int32_t e = sel[size_t(t * K + j)];
        const int32_t local = int32_t(e - d * per_rank);
        const bool here = local >= 0 && local < per_rank;
        any = any || here;
        const int32_t id = here ? local : -1;
        std::memcpy(&record[size_t(j)], &id, 4);
        std::memcpy(&record[size_t(K + j)], &wt[size_t(t * K + j)], 4);
      }
      if (!any) continue;
      std::memcpy(&record[size_t(2 * K)], xe + t * W, size_t(W) * 4);
      to[size_t(d)].insert(to[size_t(d)].end(), record.begin(), record.end());
      rows_to[size_t(d)].push_back(t);
    }
  }
  std::vector<int64_t> send_n(static_cast<size_t>(n)), recv_n(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) send_n[size_t(d)] = int64_t(rows_to[size_t(d)].size());
  g.all_to_all(send_n.data(), recv_n.data());
  std::vector<uint32_t> send_buf, recv_buf;
  std::vector<int64_t> send_b(static_cast<size_t>(n)), recv_b(static_cast<size_t>(n));
  int64_t R_in = 0;
  for (int d = 0; d < n; ++d) {
    send_buf.insert(send_buf.end(), to[size_t(d)].begin(), to[size_t(d)].end());
    send_b[size_t(d)] = send_n[size_t(d)] * rec_bytes;
    recv_b[size_t(d)] = recv_n[size_t(d)] * rec_bytes;
    R_in += recv_n[size_t(d)];
  }
  recv_buf.resize(size_t(R_in * rec_words));
  g.all_to_all_v(send_buf.data(), send_b, recv_buf.data(), recv_b);

  // My experts on the received rows: acc_in f32 [R_in, W], each row's weighted sum over its experts here.
  std::vector<float> x_in(size_t(R_in * W)), acc_in(size_t(R_in * W));
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(per_rank));
  for (int64_t i = 0; i < R_in; ++i) {
    const uint32_t* rec = recv_buf.data() + i * rec_words;
    for (int64_t j = 0; j < K; ++j) {
      int32_t id;
      float weight;
      std::memcpy(&id, &rec[size_t(j)], 4);
      std::memcpy(&weight, &rec[size_t(K + j)], 4);
      if (id < 0) continue;
      if (id >= per_rank)
        throw error("expert parallelism: a routed row names local expert " + std::to_string(id) + " of " +
                    std::to_string(per_rank));
      routed[size_t(id)].push_back({i, weight});
    }
    std::memcpy(x_in.data() + i * W, rec + 2 * K, size_t(W) * 4);
  }
  if (R_in > 0)
    kernels::active().moe_experts({x_in.data(), R_in, W, F, w.experts, &routed, w.expert_act, acc_in.data()});

  // Back to the rows' owners, in the order they came.
  std::vector<float> back;
  std::vector<int64_t> back_send_b(static_cast<size_t>(n)), back_recv_b(static_cast<size_t>(n));
  int64_t returned = 0;
  for (int d = 0; d < n; ++d) {
    back_send_b[size_t(d)] = recv_n[size_t(d)] * W * 4;
    back_recv_b[size_t(d)] = send_n[size_t(d)] * W * 4;
    returned += send_n[size_t(d)];
  }
  back.resize(size_t(returned * W));
  g.all_to_all_v(acc_in.data(), back_send_b, back.data(), back_recv_b);
  std::vector<float> acc(size_t(Tm * W), 0.0f);  // f32 [Tm, W]
  int64_t i = 0;
  for (int d = 0; d < n; ++d)
    for (const int64_t t : rows_to[size_t(d)]) {
      const float* row = back.data() + i++ * W;
      for (int64_t k = 0; k < W; ++k) acc[size_t(t * W + k)] += row[k];
    }

  std::vector<float> mine(size_t(Tm * h));  // f32 [Tm, hidden]
  if (Tm > 0) expert_outputs(w, c, acc.data(), Tm, mine.data());
  std::vector<int64_t> counts(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) counts[size_t(r)] = (first_row(r + 1) - first_row(r)) * h;
  g.all_gather_v(mine.data(), counts, out);
}

}  // namespace

void moe_forward(const moe_weights& w, const formats::model_config& c, const float* x, int64_t T, float* out,
                 const dump_sink* dump_to, const std::string& name) {
  const int64_t h = c.hidden_size;
  const parallel_layout* par = w.parallel.get();
  if (par && par->sizes.ep > 1)
    routed_ep(w, c, *par->ep, x, T, out);
  else
    routed_local(w, c, x, T, out, dump_to, name);
  dump(dump_to, name + ".routed", {T, h}, out);

  if (w.shared) {
    std::vector<float> s(size_t(T * h));  // f32 [T, hidden], added unscaled
    w.shared->apply(x, s.data(), T);
    // Tensor parallelism: each rank computed its columns' share of the down projection.
    if (par && par->sizes.tp > 1) par->tp->all_reduce_sum(s.data(), T * h);
    dump(dump_to, name + ".shared", {T, h}, s.data());
    for (int64_t i = 0; i < T * h; ++i) out[i] += s[size_t(i)];
  }
}

double dense_ffn_work_elems(const formats::model_config& c, int64_t rows, int tp) {
  return double(rows) * 4.0 * double(c.dense_intermediate_size) / tp;  // swiglu_mlp::apply: gu, g, u
}

double moe_work_elems(const formats::model_config& c, int64_t rows, int tp, int ep) {
  const auto& m = c.moe;
  const double h = double(c.hidden_size), W = double(m.expert_width(c.hidden_size));
  const double E = double(m.num_experts), K = double(m.experts_per_token), F = double(m.intermediate_size);
  const double r = double(rows) / ep;
  // routed_local: logits, sel, wt, the (row, weight) lists (16 bytes a pick), the latent inputs, acc; the
  // backend's unweighted outputs ys [r K, W] and one expert's gathered rows with gate/up (r K / E rows).
  const double routed = r * (E + 2 * K + 4 * K + (m.latent_size ? W : 0.0) + W + K * W) +
                        r * K / std::max(1.0, E) * (W + 2 * F);
  // After the routed part returns: the shared experts' sum s [rows, hidden] and their SwiGLU rows.
  const double shared =
      m.num_shared_experts > 0 ? double(rows) * (h + 4.0 * F * double(m.num_shared_experts) / tp) : 0.0;
  return std::max(routed, shared);
}

}  // namespace moxi::model
