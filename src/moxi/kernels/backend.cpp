// The reference backend (every op of the contract on the scalar kernels of kernels/ref/), the op bodies
// that split work over threads (KDA cores, MoE experts), the registry, and the one place that reads
// MOXI_KERNELS.
#include "moxi/kernels/backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/kernels/ref/kda.h"
#include "moxi/kernels/ref/swa.h"
#include "moxi/kernels/scratch.h"
#include "moxi/kernels/x86/backend.h"

namespace moxi::kernels {

namespace {

// KDA core work per thread below which one thread runs every recurrence of the call, in state elements
// touched (T * heads * D^2), the chunked prefill (one scalar exp per score element) weighted kChunkedCost
// times the decode step (docs/kernels-mxfp4.md "Thread-pool thresholds").
constexpr int64_t kKdaMinWorkPerThread = int64_t(1) << 17;
constexpr int64_t kChunkedCost = 8;

// Weight-streaming cost of an expert in token equivalents: at decode an expert's three matrices cost about
// as much to read as a few tokens' multiply-adds (GEMV ~25 vs GEMM ~75 multiply-adds per ns and core).
constexpr int64_t kExpertWeightTokens = 4;
// Expert multiply-adds per thread below which one thread runs all experts (tiny models).
constexpr int64_t kMinMoeMacsPerThread = int64_t(1) << 17;

// Owner of item j when items with cumulative costs cum[0..n] are split over nt threads: the thread whose
// share [tid, tid + 1) * total / nt holds the item's cost midpoint.
int owner(const std::vector<int64_t>& cum, size_t j, int nt) {
  return int(std::min<int64_t>(nt - 1, (cum[j] + cum[j + 1]) * nt / (2 * cum.back())));
}

mx::elem_format act_format(act_quant act) {
  return act == act_quant::MXFP8_E5M2 ? mx::elem_format::FP8_E5M2 : mx::elem_format::FP8_E4M3;
}

// Heads [h0, h1) of one sequence through the kernel for its length. All heads run in place; a subset is
// gathered into [T, h, D] slices and scattered back. Heads are independent (own state and inputs), so any
// split is bit-identical to one call over all heads.
void core_heads(const backend& be, const kda_batch& a, const kda_seq& s, int64_t h0, int64_t h1) {
  const int64_t H = a.H, D = a.D, h = h1 - h0, T = s.T;
  const auto core = T == 1 ? &backend::kda_recurrent : &backend::kda_chunked;
  const int64_t x0 = s.begin * H * D;
  if (h == H) {
    (be.*core)(a.q + x0, a.k + x0, a.v + x0, a.g + x0, a.beta + s.begin * H, a.scale, s.state, a.o + x0, T, H,
               D, D);
    return;
  }
  const size_t row = size_t(h * D) * sizeof(float), n = size_t(T * h * D);
  // This thread's grow-only copies (every element written below before the core reads it).
  thread_local std::vector<float> buf;
  float* const qs = scratch(buf, 5 * n + size_t(T * h));
  float *const ks = qs + n, *const vs = ks + n, *const gs = vs + n, *const os = gs + n, *const bs = os + n;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t src = x0 + (t * H + h0) * D, dst = t * h * D;
    std::memcpy(qs + dst, a.q + src, row);
    std::memcpy(ks + dst, a.k + src, row);
    std::memcpy(vs + dst, a.v + src, row);
    std::memcpy(gs + dst, a.g + src, row);
    std::memcpy(bs + t * h, a.beta + (s.begin + t) * H + h0, size_t(h) * sizeof(float));
  }
  (be.*core)(qs, ks, vs, gs, bs, a.scale, s.state + h0 * D * D, os, T, h, D, D);
  for (int64_t t = 0; t < T; ++t) std::memcpy(a.o + x0 + (t * H + h0) * D, os + t * h * D, row);
  if (buf.size() * sizeof(float) > kKeepScratchBytes) buf = {};
}

// Per-thread buffers of one expert's SwiGLU.
struct expert_scratch {
  std::vector<float> xin, g, u;
};

thread_local const backend* scoped = nullptr;

}  // namespace

const char* to_string(op o) {
  switch (o) {
    case op::matmul:
      return "matmul";
    case op::matmul_mxfp4:
      return "matmul_mxfp4";
    case op::fake_quantize:
      return "fake_quantize";
    case op::norms:
      return "norms";
    case op::elementwise:
      return "elementwise";
    case op::rope:
      return "rope";
    case op::kda_conv:
      return "kda_conv";
    case op::kda_recurrent:
      return "kda_recurrent";
    case op::kda_chunked:
      return "kda_chunked";
    case op::mla_absorb:
      return "mla_absorb";
    case op::mla_attention:
      return "mla_attention";
    case op::mla_sparse:
      return "mla_sparse";
    case op::indexer_scores:
      return "indexer_scores";
    case op::indexer_topk:
      return "indexer_topk";
    case op::swa_attention:
      return "swa_attention";
    case op::moe_route:
      return "moe_route";
    case op::moe_experts:
      return "moe_experts";
  }
  return "?";
}

// ---- the reference backend: the base class's ops ----

bool backend::supports(op, wformat) const {
  return false;  // the reference's own code is the base class's; other backends say what they replace
}

std::shared_ptr<const packed_weights> backend::pack_mxfp4(const uint8_t*, const uint8_t*, int64_t,
                                                          int64_t) const {
  return nullptr;
}

std::vector<float> backend::pack_mla_uv(const float*, int64_t, int64_t, int64_t, int64_t) const {
  return {};
}

void backend::matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N,
                     int64_t K) const {
  ref::matmul(x, w, bias, y, T, N, K);
}

void backend::matmul_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T,
                          int64_t N, int64_t K) const {
  ref::matmul_bf16(x, w, bias, y, T, N, K);
}

void backend::matmul_bf16_panels(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T,
                                 int64_t N, int64_t K) const {
  ref::matmul_bf16_panels(x, w, bias, y, T, N, K);
}

void backend::matmul_mxfp4(const float* x, const expert_matrix& w, float* y, int64_t T, act_quant act) const {
  MOXI_ASSERT(w.mxfp4());
  ref::matmul_mxfp4(x, w.blocks, w.scales, y, T, w.N, w.K, act);
}

void backend::matmul_expert(const float* x, const expert_matrix& w, float* y, int64_t T,
                            act_quant act) const {
  if (w.mxfp4()) return matmul_mxfp4(x, w, y, T, act);
  if (act == act_quant::NONE) return matmul(x, w.f32.data(), nullptr, y, T, w.N, w.K);
  // Same activation fake-quant as the MXFP4 GEMMs, so both storages agree bit for bit (ref/mxfp4.h).
  MOXI_ASSERT(w.K % mx::kBlock == 0);
  thread_local std::vector<float> xq;
  float* q = scratch(xq, size_t(T * w.K));
  fake_quantize(act_format(act), x, size_t(T * w.K), q);
  matmul(q, w.f32.data(), nullptr, y, T, w.N, w.K);
}

void backend::fake_quantize(mx::elem_format f, const float* x, size_t n, float* out) const {
  mx::fake_quantize(f, x, n, out);
}

void backend::rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t D, float eps) const {
  ref::rms_norm(x, w, y, rows, D, eps);
}

void backend::layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t D,
                         float eps) const {
  ref::layer_norm(x, w, b, y, rows, D, eps);
}

void backend::l2norm(const float* x, float* y, int64_t rows, int64_t D) const {
  ref::l2norm(x, y, rows, D);
}

void backend::gated_rms_norm(const float* x, const float* gate, const float* w, float* y, int64_t rows,
                             int64_t D, float eps) const {
  ref::gated_rms_norm(x, gate, w, y, rows, D, eps);
}

void backend::sigmoid(const float* x, float* y, int64_t n) const {
  ref::sigmoid(x, y, n);
}

void backend::swiglu(const float* gate, const float* up, float* y, int64_t n) const {
  ref::swiglu(gate, up, y, n);
}

void backend::mul_sigmoid(const float* x, const float* gate, float* y, int64_t n) const {
  ref::mul_sigmoid(x, gate, y, n);
}

void backend::rope_cos_sin(const int64_t* pos, const double* inv_freq, double attention_factor, float* cos,
                           float* sin, int64_t T, int64_t R) const {
  ref::rope_cos_sin(pos, inv_freq, attention_factor, cos, sin, T, R);
}

void backend::rope_apply(float* x, const float* cos, const float* sin, int64_t T, int64_t n,
                         int64_t token_stride, int64_t vec_stride, int64_t R, ref::RopeLayout layout) const {
  ref::rope_apply(x, cos, sin, T, n, token_stride, vec_stride, R, layout);
}

void backend::causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int64_t T, int64_t C,
                                 int64_t W) const {
  ref::causal_conv1d_silu(x, w, state, y, T, C, W);
}

void backend::kda_gate_softplus(const float* graw, const float* A_log, const float* dt_bias, float* g,
                                int64_t T, int64_t H, int64_t K) const {
  ref::kda_gate_softplus(graw, A_log, dt_bias, g, T, H, K);
}

void backend::kda_gate_lower_bound(const float* graw, const float* A_log, const float* dt_bias, float lb,
                                   float* g, int64_t T, int64_t H, int64_t K) const {
  ref::kda_gate_lower_bound(graw, A_log, dt_bias, lb, g, T, H, K);
}

void backend::kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                            float scale, float* state, float* o, int64_t T, int64_t H, int64_t K,
                            int64_t V) const {
  ref::kda_recurrent(q, k, v, g, beta, scale, state, o, T, H, K, V);
}

void backend::kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                          float scale, float* state, float* o, int64_t T, int64_t H, int64_t K,
                          int64_t V) const {
  ref::kda_chunked(q, k, v, g, beta, scale, state, o, T, H, K, V);
}

void backend::kda_cores(const kda_batch& b) const {
  run_kda_cores(b, false);
}

void backend::mla_absorb_q(const float* q, const float* wkv_b, float* q_lat, int64_t T, int64_t H, int64_t Dn,
                           int64_t Dr, int64_t Dv, int64_t L) const {
  ref::mla_absorb_q(q, wkv_b, q_lat, T, H, Dn, Dr, Dv, L);
}

void backend::mla_unabsorb_o(const float* o_lat, const float* wkv_b, std::span<const float>, float* o,
                             int64_t T, int64_t H, int64_t Dn, int64_t Dv, int64_t L) const {
  ref::mla_unabsorb_o(o_lat, wkv_b, o, T, H, Dn, Dv, L);
}

void backend::mla_attention_absorbed(const float* q_lat, const float* latent, float* o_lat, int64_t T,
                                     int64_t S, int64_t H, int64_t L, int64_t Dr, float scale) const {
  ref::mla_attention_absorbed(q_lat, latent, o_lat, T, S, H, L, Dr, scale);
}

void backend::mla_attention_absorbed_sparse(const float* q_lat, const float* latent, const int32_t* indices,
                                            float* o_lat, int64_t T, int64_t S, int64_t H, int64_t L,
                                            int64_t Dr, int64_t topk, float scale) const {
  ref::mla_attention_absorbed_sparse(q_lat, latent, indices, o_lat, T, S, H, L, Dr, topk, scale);
}

void backend::indexer_scores(const float* q, const uint8_t* k, const float* w, float* scores, int64_t T,
                             int64_t S, int64_t HI, int64_t D) const {
  ref::indexer_scores(q, k, w, scores, T, S, HI, D);
}

void backend::sliding_window_attention(const float* q, const float* k, const float* v, float* o, int64_t T,
                                       int64_t S, int64_t H, int64_t KVH, int64_t D, int64_t window,
                                       float scale) const {
  ref::sliding_window_attention(q, k, v, o, T, S, H, KVH, D, window, scale);
}

void backend::indexer_topk(const float* scores, int32_t* indices, int64_t T, int64_t S, int64_t k) const {
  ref::indexer_topk(scores, indices, T, S, k);
}

void backend::moe_route(const float* logits, const float* bias, const ref::RouterConfig& cfg,
                        int32_t* experts, float* weights, int64_t T) const {
  ref::moe_route(logits, bias, cfg, experts, weights, T);
}

void backend::moe_experts(const moe_batch& b) const {
  run_moe_experts(b, false);
}

// ---- bodies split over threads ----

// Every sequence's KDA core in ONE pool job (parallel): the (sequence, head) pairs, in order, are split
// statically over the threads balanced by cost, each thread running its heads of each sequence as one core
// call. Below the work threshold, or serial, the calling thread runs each sequence whole.
void backend::run_kda_cores(const kda_batch& a, bool parallel) const {
  const int64_t H = a.H, D = a.D;
  if (!parallel) {
    for (const kda_seq& s : a.seqs) core_heads(*this, a, s, 0, H);
    return;
  }
  std::vector<int64_t> cum(a.seqs.size() * size_t(H) + 1,
                           0);  // cumulative cost of the (sequence, head) pairs
  for (size_t i = 0; i < a.seqs.size(); ++i)
    for (int64_t h = 0; h < H; ++h) {
      const size_t j = i * size_t(H) + size_t(h);
      cum[j + 1] = cum[j] + a.seqs[i].T * D * D * (a.seqs[i].T == 1 ? 1 : kChunkedCost);
    }
  thread_pool::global().run_if(cum.back(), kKdaMinWorkPerThread, [&](int tid, int nt) {
    for (size_t i = 0; i < a.seqs.size(); ++i) {
      int64_t h0 = -1;
      for (int64_t h = 0; h <= H; ++h) {
        const bool mine = h < H && owner(cum, i * size_t(H) + size_t(h), nt) == tid;
        if (mine && h0 < 0) h0 = h;
        if (!mine && h0 >= 0) {
          core_heads(*this, a, a.seqs[i], h0, h);
          h0 = -1;
        }
      }
    }
  });
}

// Routed experts (parallel: ONE pool job per MoE layer). The active experts are split statically over the
// threads in expert order, balanced by cost (weights + tokens); each thread runs its experts whole (gather
// its tokens, gate/up, SwiGLU, down into its rows of ys), the kernels it calls inline (a nested pool run
// does). Then the weighted scatter-add in expert order on the calling thread, so the result does not depend
// on the thread count.
void backend::run_moe_experts(const moe_batch& b, bool parallel) const {
  const auto& routed = *b.routed;
  const int64_t E = int64_t(b.experts.size()), W = b.W, F = b.F;
  std::vector<int64_t> active, row0(size_t(E), 0);
  int64_t rows = 0;
  for (int64_t e = 0; e < E; ++e)
    if (!routed[size_t(e)].empty()) {
      active.push_back(e);
      row0[size_t(e)] = rows;
      rows += int64_t(routed[size_t(e)].size());
    }
  std::vector<float> ys(size_t(rows * W));  // f32 [T * top_k, W] every routed expert output, unweighted
  auto run_expert = [&](int64_t e, expert_scratch& s) {
    const auto& list = routed[size_t(e)];
    const int64_t n = int64_t(list.size());
    s.xin.resize(size_t(n * W));
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(s.xin.data() + i * W, b.x + list[size_t(i)].first * W, size_t(W) * sizeof(float));
    s.g.resize(size_t(n * F));
    s.u.resize(size_t(n * F));
    const expert_weights& ex = b.experts[size_t(e)];
    matmul_expert(s.xin.data(), ex.gate, s.g.data(), n, b.act);
    matmul_expert(s.xin.data(), ex.up, s.u.data(), n, b.act);
    swiglu(s.g.data(), s.u.data(), s.g.data(), n * F);
    matmul_expert(s.g.data(), ex.down, ys.data() + row0[size_t(e)] * W, n, b.act);
  };
  if (parallel && !active.empty()) {
    std::vector<int64_t> cum(active.size() + 1, 0);  // cumulative cost, in multiply-adds
    for (size_t i = 0; i < active.size(); ++i)
      cum[i + 1] = cum[i] + 3 * F * W * (kExpertWeightTokens + int64_t(routed[size_t(active[i])].size()));
    thread_pool::global().run_if(cum.back(), kMinMoeMacsPerThread, [&](int tid, int nt) {
      thread_local expert_scratch s;
      for (size_t i = 0; i < active.size(); ++i)
        if (owner(cum, i, nt) == tid) run_expert(active[i], s);
    });
  } else {
    expert_scratch s;
    for (const int64_t e : active) run_expert(e, s);
  }
  std::fill(b.out, b.out + b.T * W, 0.0f);
  for (const int64_t e : active) {
    const auto& list = routed[size_t(e)];
    for (size_t i = 0; i < list.size(); ++i) {
      const auto [t, s] = list[i];
      float* a = b.out + t * W;
      const float* yr = ys.data() + (row0[size_t(e)] + int64_t(i)) * W;
      for (int64_t d = 0; d < W; ++d) a[d] += s * yr[d];
    }
  }
}

// ---- registry and selection ----

const backend& reference() {
  static const backend ref;
  return ref;
}

std::span<const backend* const> backends() {
  // One line per backend folder, in order of preference (the reference first).
  static const std::vector<const backend*> all = [] {
    std::vector<const backend*> v{&reference()};
    for (const backend* b : x86::backends()) v.push_back(b);
    return v;
  }();
  return all;
}

const backend* find_backend(std::string_view name) {
  for (const backend* b : backends())
    if (name == b->name()) return b;
  return nullptr;
}

const backend& default_backend() {
  static const backend& chosen = []() -> const backend& {
    const auto all = backends();
    size_t cap = all.size() - 1;
    if (const char* env = std::getenv("MOXI_KERNELS"))
      for (size_t i = 0; i < all.size(); ++i)
        if (std::string_view(env) == all[i]->name()) cap = i;
    for (size_t i = cap + 1; i-- > 0;)
      if (all[i]->available()) return *all[i];
    return reference();
  }();
  return chosen;
}

const backend& active() {
  return scoped ? *scoped : default_backend();
}

backend_scope::backend_scope(const backend& b) : prev_(scoped) {
  scoped = &b;
}

backend_scope::~backend_scope() {
  scoped = prev_;
}

}  // namespace moxi::kernels
