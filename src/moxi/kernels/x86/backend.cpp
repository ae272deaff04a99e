// The x86 backends: which ops have AVX-512 code, their per-thread grow-only scratch, and how each op splits
// over the global thread pool (weight rows for the matmuls, (sequence, head) pairs for the KDA cores,
// queries for the sparse attention, experts for the MoE; every split is static, so results do not depend
// on the schedule). This file is built for baseline x86-64: it calls the AVX-512 translation units only
// after cpu() has confirmed the features (available()), and they include no standard-library templates
// (the scratch comes from here), so the linker can never pick an AVX-512 body of a shared inline function
// for code that runs on other CPUs.
#include "moxi/kernels/x86/backend.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/base/thread-pool.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/kernels/ref/kda.h"
#include "moxi/kernels/scratch.h"
#include "moxi/kernels/x86/cpu.h"
#include "moxi/kernels/x86/kda-x86.h"
#include "moxi/kernels/x86/mla-x86.h"
#include "moxi/kernels/x86/mxfp4-matmul.h"

namespace moxi::kernels::x86 {

#if defined(__x86_64__)

// matmul-f32-avx512.cpp: output columns [n0, n1) for all T tokens.
void matmul_f32_avx512(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N,
                       int64_t K, int64_t n0, int64_t n1);
void matmul_bf16w_avx512(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                         int64_t K, int64_t n0, int64_t n1);
// W bf16 in 16-row panels (ref::bf16_panel_index): output columns of panels [p0, p1) for all T tokens.
void matmul_bf16p_avx512(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                         int64_t K, int64_t p0, int64_t p1);
double fma_f32_peak_avx512(int64_t iters);
// dsa-avx512.cpp: the score columns of keys [s_begin, s_end); kt scratch f32 [D * 32].
void indexer_scores_avx512(const float* q, const uint8_t* k, const float* w, float* scores, int64_t T,
                           int64_t S, int64_t HI, int64_t D, float* kt, int64_t s_begin, int64_t s_end);
int64_t indexer_next_above_avx512(const float* row, int64_t from, int64_t to, float thr);
// elementwise-avx512.cpp: the reference's operations lane by lane (bit-identical).
void sigmoid_avx512(const float* x, float* y, int64_t n);
void swiglu_avx512(const float* gate, const float* up, float* y, int64_t n);
void mul_sigmoid_avx512(const float* x, const float* gate, float* y, int64_t n);
void causal_conv1d_silu_avx512(const float* x, const float* wt, float* state, float* y, int64_t T, int64_t C,
                               int64_t W);
void kda_gate_lower_bound_avx512(const float* graw, const float* a, const float* dt_bias, float lb, float* g,
                                 int64_t T, int64_t H, int64_t K);
void gated_rms_norm_avx512(const float* x, const float* gate, const float* w, float* y, int64_t rows,
                           int64_t D, float eps);
void rms_norm_avx512(const float* x, const float* w, float* y, int64_t rows, int64_t D, float eps);
void l2norm_avx512(const float* x, float* y, int64_t rows, int64_t D, float eps);
// mx-avx512.cpp: x f32 [n], scales u8 [n / 32] from mx::block_scale.
void fake_quantize_fp8_avx512(bool e4m3, const float* x, const uint8_t* scales, int64_t n, float* out);

static_assert(kKdaChunk == ref::kda_chunk_size, "the AVX-512 chunked prefill must use the same chunks");
static_assert(kKdaSubChunk == ref::kda_sub_chunk, "and the same sub-chunks");

namespace {

// Multiply-adds per thread below which a pool hand-off costs more than the split saves (a few us against
// ~15k MACs/us of a cached AVX-512 row, docs/kernels-mxfp4.md "Thread-pool thresholds"): router, small KDA
// projections, every matmul of the tiny models.
constexpr int64_t kMinMacsPerThread = int64_t(1) << 16;
// Sparse-attention multiply-adds per thread below which splitting queries over the pool costs more than
// it saves (docs/kernels-mxfp4.md "Thread-pool thresholds").
constexpr int64_t kDsaMinWorkPerThread = int64_t(1) << 18;
// Tokens from which the AMX backend runs dense BF16 products on tiles: prefill chunks, never a decode step
// of fewer sequences (docs/kernels.md "Dense layers").
constexpr int64_t kAmxDenseMinTokens = 128;

template <class Wt, class Kernel>
void run_matmul(const float* x, const Wt* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K,
                Kernel kernel) {
  if (T == 0 || N == 0) return;
  thread_pool::global().run_if(T * N * K, kMinMacsPerThread, [&](int tid, int nt) {
    const range r = split_range(N, tid, nt, 4);
    if (r.begin < r.end) kernel(x, w, bias, y, T, N, K, r.begin, r.end);
  });
}

// A candidate (score, position) as one integer whose order is ref::indexer_ranks_before's, the larger
// ranking first: the score's bits made monotone (both zeros alike, every NaN below -inf) above the
// position's complement (among equal scores the lower position first). Heap steps then compare integers
// in registers instead of loading two scores and testing them for NaN.
inline uint64_t rank_key(float score, int64_t pos) {
  const uint32_t b = std::bit_cast<uint32_t>(score == 0.0f ? 0.0f : score);
  const uint32_t u = score != score ? 0u : (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return uint64_t(u) << 32 | uint64_t(~uint32_t(pos));
}
inline int32_t key_position(uint64_t key) {
  return int32_t(~uint32_t(key));
}

// The k best positions of row[begin, end) under ref::indexer_ranks_before, best first, appended to `out`
// (min(k, end - begin) of them). A heap of the k best so far whose root is the worst of them, and a
// vectorized scan for the next score that beats that root: the same set and order as the reference's
// partial sort, which compares every position with the heap.
void topk_of_range(const float* row, int64_t begin, int64_t end, int64_t k, std::vector<int32_t>& out) {
  thread_local std::vector<uint64_t> heap;
  heap.clear();
  const int64_t m = std::min(k, end - begin);
  for (int64_t s = begin; s < begin + m; ++s) heap.push_back(rank_key(row[s], s));
  const std::greater<uint64_t> ranks_first;               // a > b: a ranks before b
  std::make_heap(heap.begin(), heap.end(), ranks_first);  // under this order the root is the worst of the k
  for (int64_t s = begin + m; m > 0 && s < end; ++s) {
    s = indexer_next_above_avx512(row, s, end, row[key_position(heap.front())]);
    if (s == end) break;
    std::pop_heap(heap.begin(), heap.end(), ranks_first);
    heap.back() = rank_key(row[s], s);
    std::push_heap(heap.begin(), heap.end(), ranks_first);
  }
  std::sort(heap.begin(), heap.end(), ranks_first);
  for (const uint64_t key : heap) out.push_back(key_position(key));
}

// Scratch of the MLA twins for `rows` attended rows of width Wl.
mla_avx512_scratch mla_scratch(int64_t rows, int64_t Wl) {
  thread_local std::vector<float> qt, p;
  thread_local std::vector<int64_t> idx;
  return {scratch(qt, size_t(Wl * 16)), scratch(p, size_t(rows * 16)), scratch(idx, size_t(rows))};
}

class avx512_backend final : public backend {
 public:
  explicit avx512_backend(mxfp4_variant v) : v_(v) {}

  const char* name() const override { return to_string(v_); }
  bool available() const override { return mxfp4_supported(v_); }
  bool supports(op o, wformat f) const override {
    switch (o) {
      case op::matmul:
        return f == wformat::F32 || f == wformat::BF16;
      case op::matmul_mxfp4:
        return f == wformat::MXFP4;
      case op::fake_quantize:
      case op::norms:  // rms_norm, l2norm and gated_rms_norm; layer_norm (vision) stays the reference's
      case op::elementwise:
      case op::kda_conv:  // the convolution and the lower-bound gate; the softplus gate stays the reference's
      case op::kda_recurrent:
      case op::kda_chunked:
      case op::mla_absorb:
      case op::mla_attention:
      case op::mla_sparse:
      case op::indexer_scores:
      case op::indexer_topk:
      case op::moe_experts:  // its own thread split; the matmuls inside are this backend's
        return true;
      default:
        return false;
    }
  }

  bool keeps_bf16_weights() const override { return true; }
  bool packs_bf16_panels() const override { return true; }
  std::shared_ptr<const packed_weights> pack_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t N,
                                                   int64_t K) const override {
    return std::make_shared<const packed_mxfp4>(x86::pack_mxfp4(blocks, scales, N, K, v_));
  }
  // W_UV of every head transposed, f32 [H, L, Dv]: uv[(h*L + l)*Dv + j] = W_UV_h[j][l] (row h*(Dn+Dv) + Dn
  // + j of wkv_b), so the unabsorb loads 16 outputs' weights contiguously instead of gathering them with
  // stride L (same values, same order: bit-identical).
  std::vector<float> pack_mla_uv(const float* wkv_b, int64_t H, int64_t Dn, int64_t Dv,
                                 int64_t L) const override {
    std::vector<float> t(size_t(H * L * Dv));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < Dv; ++j) {
        const float* row = wkv_b + (h * (Dn + Dv) + Dn + j) * L;
        for (int64_t l = 0; l < L; ++l) t[size_t((h * L + l) * Dv + j)] = row[l];
      }
    return t;
  }

  void matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N,
              int64_t K) const override {
    run_matmul(x, w, bias, y, T, N, K, matmul_f32_avx512);
  }
  void matmul_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                   int64_t K) const override {
    run_matmul(x, w, bias, y, T, N, K, matmul_bf16w_avx512);
  }
  void matmul_bf16_panels(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T,
                          int64_t N, int64_t K) const override {
    if (T == 0 || N == 0) return;
    if (v_ == mxfp4_variant::AMX_BF16 && T >= kAmxDenseMinTokens && K % 32 == 0)
      return detail::matmul_bf16_panels_amx(x, w, bias, y, T, N, K, detail::amx_tiles::HARDWARE);
    const int64_t panels = (N + ref::kBf16PanelRows - 1) / ref::kBf16PanelRows;
    thread_pool::global().run_if(T * N * K, kMinMacsPerThread, [&](int tid, int nt) {
      const range r = split_range(panels, tid, nt);
      if (r.begin < r.end) matmul_bf16p_avx512(x, w, bias, y, T, N, K, r.begin, r.end);
    });
  }
  // The kernel of the pack's variant (a pack made by another x86 backend runs as packed); weights without
  // an x86 pack (loaded by the reference) run the reference.
  void matmul_mxfp4(const float* x, const expert_matrix& w, float* y, int64_t T,
                    act_quant act) const override {
    if (const auto* p = dynamic_cast<const packed_mxfp4*>(w.packed.get()))
      return x86::matmul_mxfp4(x, *p, y, T, act);
    backend::matmul_mxfp4(x, w, y, T, act);
  }
  void fake_quantize(mx::elem_format f, const float* x, size_t n, float* out) const override {
    x86::fake_quantize(f, x, n, out);
  }
  void sigmoid(const float* x, float* y, int64_t n) const override { sigmoid_avx512(x, y, n); }
  void swiglu(const float* gate, const float* up, float* y, int64_t n) const override {
    swiglu_avx512(gate, up, y, n);
  }
  void mul_sigmoid(const float* x, const float* gate, float* y, int64_t n) const override {
    mul_sigmoid_avx512(x, gate, y, n);
  }
  void causal_conv1d_silu(const float* x, const float* w, float* state, float* y, int64_t T, int64_t C,
                          int64_t W) const override {
    MOXI_ASSERT(W >= 1);
    causal_conv1d_silu_avx512(x, w, state, y, T, C, W);
  }
  void kda_gate_lower_bound(const float* graw, const float* A_log, const float* dt_bias, float lb, float* g,
                            int64_t T, int64_t H, int64_t K) const override {
    thread_local std::vector<float> a_buf;
    float* a = scratch(a_buf, size_t(H));
    for (int64_t h = 0; h < H; ++h) a[h] = A_log ? std::exp(A_log[h]) : 1.0f;  // the reference's libm exp
    kda_gate_lower_bound_avx512(graw, a, dt_bias, lb, g, T, H, K);
  }
  void gated_rms_norm(const float* x, const float* gate, const float* w, float* y, int64_t rows, int64_t D,
                      float eps) const override {
    gated_rms_norm_avx512(x, gate, w, y, rows, D, eps);
  }
  void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t D, float eps) const override {
    rms_norm_avx512(x, w, y, rows, D, eps);
  }
  void l2norm(const float* x, float* y, int64_t rows, int64_t D) const override {
    l2norm_avx512(x, y, rows, D, 1e-6f);  // ref::l2norm's default eps, as backend::l2norm passes it
  }

  void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                     float scale, float* state, float* o, int64_t T, int64_t H, int64_t K,
                     int64_t V) const override {
    thread_local std::vector<float> delta;
    kda_recurrent_avx512(q, k, v, g, beta, scale, state, o, T, H, K, V, scratch(delta, size_t(V)));
  }
  void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float scale, float* state, float* o, int64_t T, int64_t H, int64_t K,
                   int64_t V) const override {
    const size_t C = size_t(ref::kda_chunk_size), Ks = size_t(K), Vs = size_t(V);
    thread_local std::vector<double> G, GT;
    thread_local std::vector<float> KT, Aqk, L, Wm, U, decay, KFT, QE, KE;
    const size_t subs = C / size_t(ref::kda_sub_chunk);
    const kda_chunk_scratch w{scratch(G, C * Ks),      scratch(GT, Ks * C),   scratch(KT, Ks * C),
                              scratch(Aqk, C * C),     scratch(L, C * C),     scratch(Wm, C * Ks),
                              scratch(U, C * Vs),      scratch(decay, C * Ks), scratch(KFT, Ks * C),
                              scratch(QE, subs * Ks),  scratch(KE, subs * Ks)};
    kda_chunked_avx512(q, k, v, g, beta, scale, state, o, T, H, K, V, w);
  }
  void kda_cores(const kda_batch& b) const override { run_kda_cores(b, true); }

  void mla_absorb_q(const float* q, const float* wkv_b, float* q_lat, int64_t T, int64_t H, int64_t Dn,
                    int64_t Dr, int64_t Dv, int64_t L) const override {
    mla_absorb_q_avx512(q, wkv_b, q_lat, T, H, Dn, Dr, Dv, L);
  }
  // From pack_mla_uv's layout; without it (weights loaded by the reference) the reference runs.
  void mla_unabsorb_o(const float* o_lat, const float* wkv_b, std::span<const float> uv, float* o, int64_t T,
                      int64_t H, int64_t Dn, int64_t Dv, int64_t L) const override {
    if (uv.empty()) return backend::mla_unabsorb_o(o_lat, wkv_b, uv, o, T, H, Dn, Dv, L);
    MOXI_ASSERT(int64_t(uv.size()) == H * L * Dv);
    mla_unabsorb_o_avx512(o_lat, uv.data(), o, T, H, Dv, L);
  }
  void mla_attention_absorbed(const float* q_lat, const float* latent, float* o_lat, int64_t T, int64_t S,
                              int64_t H, int64_t L, int64_t Dr, float scale) const override {
    MOXI_ASSERT(S >= T);
    mla_attention_absorbed_avx512(q_lat, latent, o_lat, T, S, H, L, Dr, scale, mla_scratch(S, L + Dr));
  }
  // Queries are independent here (each attends to its own selected rows, no positional mask), so splitting
  // them over the pool, when each thread gets enough work, is bit-identical to one call.
  void mla_attention_absorbed_sparse(const float* q_lat, const float* latent, const int32_t* indices,
                                     float* o_lat, int64_t T, int64_t S, int64_t H, int64_t L, int64_t Dr,
                                     int64_t topk, float scale) const override {
    for (int64_t i = 0; i < T * topk; ++i)
      MOXI_ASSERT(indices[i] < S, "sparse attention index past the latent cache");
    const int64_t Wl = L + Dr;
    auto rows = [&](int64_t t0, int64_t t1) {
      mla_attention_absorbed_sparse_avx512(q_lat + t0 * H * Wl, latent, indices + t0 * topk,
                                           o_lat + t0 * H * L, t1 - t0, H, L, Dr, topk, scale,
                                           mla_scratch(topk, Wl));
    };
    if (T > 1 && T * topk * H * Wl >= 2 * kDsaMinWorkPerThread) {
      thread_pool::global().run([&](int tid, int nt) {
        const range r = split_range(T, tid, nt);
        if (r.begin < r.end) rows(r.begin, r.end);
      });
    } else {
      rows(0, T);
    }
  }
  void indexer_scores(const float* q, const uint8_t* k, const float* w, float* scores, int64_t T, int64_t S,
                      int64_t HI, int64_t D) const override {
    MOXI_ASSERT(S >= T);
    // The keys in 16-key blocks split over the pool (a decode step's scan at long context is one query:
    // splitting queries would leave all but one thread idle). Every score is computed whole by one thread,
    // so the split changes no bit.
    const int64_t blocks = (S + 15) / 16;
    thread_pool::global().run_if(T * S * HI * D, kMinMacsPerThread, [&](int tid, int nt) {
      const range r = split_range(blocks, tid, nt);
      if (r.begin >= r.end) return;
      thread_local std::vector<float> kt;
      indexer_scores_avx512(q, k, w, scores, T, S, HI, D, scratch(kt, size_t(D * 32)), r.begin * 16,
                            std::min(S, r.end * 16));
    });
  }

  // Rows over the pool; a single row (decode) split by key range, each thread's k best merged: the order is
  // total (ties by position), so the result is the reference's whatever the split.
  void indexer_topk(const float* scores, int32_t* indices, int64_t T, int64_t S, int64_t k) const override {
    MOXI_ASSERT(S >= T && k >= 0);
    auto row_topk = [&](int64_t t) {
      const float* row = scores + t * S;
      const int64_t n = S - T + t + 1;
      thread_local std::vector<int32_t> best;
      best.clear();
      topk_of_range(row, 0, n, k, best);
      int32_t* o = indices + t * k;
      for (int64_t j = 0; j < k; ++j) o[j] = j < int64_t(best.size()) ? best[size_t(j)] : -1;
    };
    if (T > 1) {
      thread_pool::global().run_if(T * S, kMinMacsPerThread, [&](int tid, int nt) {
        const range r = split_range(T, tid, nt);
        for (int64_t t = r.begin; t < r.end; ++t) row_topk(t);
      });
      return;
    }
    const int nt = thread_pool::global().size();
    if (T == 0 || S < 4 * k * nt || nt == 1) {
      for (int64_t t = 0; t < T; ++t) row_topk(t);
      return;
    }
    std::vector<std::vector<int32_t>> part(static_cast<size_t>(nt));
    thread_pool::global().run([&](int tid, int n) {
      const range r = split_range(S, tid, n, 16);
      if (r.begin < r.end) topk_of_range(scores, r.begin, r.end, k, part[size_t(tid)]);
    });
    std::vector<uint64_t> all;
    for (const auto& p : part)
      for (const int32_t s : p) all.push_back(rank_key(scores[s], s));
    const int64_t m = std::min<int64_t>(k, int64_t(all.size()));
    std::partial_sort(all.begin(), all.begin() + m, all.end(), std::greater<uint64_t>());
    for (int64_t j = 0; j < k; ++j) indices[j] = j < m ? key_position(all[size_t(j)]) : -1;
  }

  void moe_experts(const moe_batch& b) const override { run_moe_experts(b, true); }

  mxfp4_variant variant() const { return v_; }

 private:
  mxfp4_variant v_;
};

}  // namespace

void fake_quantize(mx::elem_format f, const float* x, size_t n, float* out) {
  if (f == mx::elem_format::FP4_E2M1 || !cpu().avx512) return mx::fake_quantize(f, x, n, out);
  MOXI_ASSERT(n % mx::kBlock == 0, "MX rows must be a multiple of the 32-element block");
  thread_local std::vector<uint8_t> scales;
  uint8_t* s = scratch(scales, n / mx::kBlock);
  for (size_t b = 0; b < n / mx::kBlock; ++b) s[b] = mx::block_scale(f, x + b * mx::kBlock);
  fake_quantize_fp8_avx512(f == mx::elem_format::FP8_E4M3, x, s, int64_t(n), out);
}

mxfp4_variant mxfp4_variant_of(const backend& b) {
  const auto* x = dynamic_cast<const avx512_backend*>(&b);
  return x ? x->variant() : mxfp4_variant::REF;
}

int64_t dense_tile_min_tokens(const backend& b) {
  return mxfp4_variant_of(b) == mxfp4_variant::AMX_BF16 ? kAmxDenseMinTokens
                                                        : std::numeric_limits<int64_t>::max();
}

void matmul_bf16_rows(const float* x, const uint16_t* w, float* y, int64_t T, int64_t N, int64_t K) {
  MOXI_ASSERT(cpu().avx512, "the AVX-512 row-layout matmul needs AVX-512");
  run_matmul(x, w, nullptr, y, T, N, K, matmul_bf16w_avx512);
}

double fma_f32_peak_loop(int64_t iters) {
  MOXI_ASSERT(cpu().avx512, "the AVX-512 FMA peak loop needs AVX-512");
  return fma_f32_peak_avx512(iters);
}

std::span<const backend* const> backends() {
  static const avx512_backend avx512(mxfp4_variant::AVX512), bf16(mxfp4_variant::AVX512_BF16),
      amx(mxfp4_variant::AMX_BF16);
  static const backend* const all[] = {&avx512, &bf16, &amx};
  return all;
}

#else

void matmul_bf16_rows(const float* x, const uint16_t* w, float* y, int64_t T, int64_t N, int64_t K) {
  ref::matmul_bf16(x, w, nullptr, y, T, N, K);
}

double fma_f32_peak_loop(int64_t) {
  return 0.0;
}

mxfp4_variant mxfp4_variant_of(const backend&) {
  return mxfp4_variant::REF;
}

int64_t dense_tile_min_tokens(const backend&) {
  return std::numeric_limits<int64_t>::max();
}

void fake_quantize(mx::elem_format f, const float* x, size_t n, float* out) {
  mx::fake_quantize(f, x, n, out);
}

std::span<const backend* const> backends() {
  return {};
}

#endif

}  // namespace moxi::kernels::x86
