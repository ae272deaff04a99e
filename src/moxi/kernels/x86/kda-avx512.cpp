// KDA recurrent decode on AVX-512 F: the same arithmetic as ref::kda_recurrent, element for element and in
// the same order (decay, k^T S, delta, rank-1 update, o = S^T (scale q)), vectorized over V and fused into
// two passes over each head's [K, V] state instead of four. Products and sums are separate instructions
// (this file is built with -ffp-contract=off) and exp is the same libm call, so the result is bit-identical
// to the reference (tests/kernels/kda-fast-test.cpp).
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt); called only after
// kernels::x86::cpu() confirmed them. Only intrinsics and C headers are included, and scratch comes from
// the caller: no template of a shared header (std::vector) gets an AVX-512 body the linker could pick for
// code that runs on other CPUs.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace moxi::kernels::x86 {
namespace {

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// One head, one token. S f32 [K, V], delta scratch f32 [V].
void recurrent_head(const float* qt, const float* kt, const float* vt, const float* gt, float bt, float scale,
                    float* S, float* ot, float* delta, int64_t K, int64_t V) {
  for (int64_t j = 0; j < V; j += 16) _mm512_mask_storeu_ps(delta + j, tail_mask(V - j), _mm512_setzero_ps());
  // Pass 1: decay each state row, then accumulate k^T S over rows in order (ref: two loops, same order).
  for (int64_t d = 0; d < K; ++d) {
    const __m512 e = _mm512_set1_ps(std::exp(gt[d]));
    const __m512 kd = _mm512_set1_ps(kt[d]);
    float* row = S + d * V;
    for (int64_t j = 0; j < V; j += 16) {
      const __mmask16 m = tail_mask(V - j);
      const __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), e);
      _mm512_mask_storeu_ps(row + j, m, s);
      const __m512 acc = _mm512_add_ps(_mm512_maskz_loadu_ps(m, delta + j), _mm512_mul_ps(kd, s));
      _mm512_mask_storeu_ps(delta + j, m, acc);
    }
  }
  const __m512 b = _mm512_set1_ps(bt);
  for (int64_t j = 0; j < V; j += 16) {
    const __mmask16 m = tail_mask(V - j);
    const __m512 u = _mm512_mul_ps(
        b, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, vt + j), _mm512_maskz_loadu_ps(m, delta + j)));
    _mm512_mask_storeu_ps(delta + j, m, u);
    _mm512_mask_storeu_ps(ot + j, m, _mm512_setzero_ps());
  }
  // Pass 2: rank-1 update of each row, then o += (scale q_d) S[d] over rows in order.
  for (int64_t d = 0; d < K; ++d) {
    const __m512 kd = _mm512_set1_ps(kt[d]);
    const __m512 qd = _mm512_set1_ps(scale * qt[d]);
    float* row = S + d * V;
    for (int64_t j = 0; j < V; j += 16) {
      const __mmask16 m = tail_mask(V - j);
      const __m512 s = _mm512_add_ps(_mm512_maskz_loadu_ps(m, row + j),
                                     _mm512_mul_ps(kd, _mm512_maskz_loadu_ps(m, delta + j)));
      _mm512_mask_storeu_ps(row + j, m, s);
      _mm512_mask_storeu_ps(ot + j, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, ot + j), _mm512_mul_ps(qd, s)));
    }
  }
}

}  // namespace

void kda_recurrent_avx512(const float* q, const float* k, const float* v, const float* g, const float* beta,
                          float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V,
                          float* delta) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t qk = (t * H + h) * K, ov = (t * H + h) * V;
      recurrent_head(q + qk, k + qk, v + ov, g + qk, beta[t * H + h], scale, state + h * K * V, o + ov, delta,
                     K, V);
    }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
