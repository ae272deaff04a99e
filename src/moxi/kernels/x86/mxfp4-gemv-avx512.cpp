// MXFP4 decode GEMV (T <= 4 tokens) on AVX-512 F/BW/VL/DQ over the panel-16 layout: one 64-byte load
// holds 4 K-pairs of 16 rows; per K-pair two shifts and two VPERMPS against an in-register 16-entry table
// give the exact fp32 weights, FMAs accumulate one 32-block, and one FMA applies the block's exact E8M0
// factor per row.
// Memory-bound at T = 1: every weight byte is read exactly once, contiguously per panel.
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt). Only intrinsics and the
// plain header are included, so no inline function of a shared header gets an AVX-512 body that the linker
// could pick for callers on other CPUs.
#if defined(__x86_64__)
#include <immintrin.h>

#include "moxi/kernels/x86/mxfp4-avx512-inl.h"
#include "moxi/kernels/x86/mxfp4-x86.h"

namespace moxi::kernels::x86 {
namespace {

// PP panels side by side (PP x TT independent FMA chains hide the FMA latency), TT tokens per decode.
template <int PP, int TT>
void gemv_panels(const float* x, const mxfp4_panels& w, int64_t P0, float* y) {
  const int64_t K = w.K, half = K / 2, nb = K / 32;
  const __m512 table = fp4_table();
  const uint8_t* q[PP];
#pragma GCC unroll 32
  for (int i = 0; i < PP; ++i) q[i] = w.qs + (P0 + i) * half * 16;
  __m512 acc[PP][TT];
#pragma GCC unroll 32
  for (int i = 0; i < PP; ++i)
#pragma GCC unroll 32
    for (int t = 0; t < TT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512 bacc[PP][TT];
#pragma GCC unroll 32
    for (int i = 0; i < PP; ++i)
#pragma GCC unroll 32
      for (int t = 0; t < TT; ++t) bacc[i][t] = _mm512_setzero_ps();
    const int64_t k0 = b * 32;
#pragma GCC unroll 32
    for (int j = 0; j < 16; ++j) {  // K-pair j of the block: nibble j % 4 of each half of group j / 4
      __m512 xe[TT], xo[TT];
#pragma GCC unroll 32
      for (int t = 0; t < TT; ++t) {
        xe[t] = _mm512_set1_ps(x[t * K + k0 + 2 * j]);
        xo[t] = _mm512_set1_ps(x[t * K + k0 + 2 * j + 1]);
      }
#pragma GCC unroll 32
      for (int i = 0; i < PP; ++i) {
        const __m512i v = _mm512_loadu_si512(q[i] + (j / 4) * 64);
        // VPERMPS reads only index bits 0-3: the even element's code, then the odd one's.
        const __m512 we = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4 * (j % 4)), table);
        const __m512 wo = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 16 + 4 * (j % 4)), table);
#pragma GCC unroll 32
        for (int t = 0; t < TT; ++t) {
          bacc[i][t] = _mm512_fmadd_ps(we, xe[t], bacc[i][t]);
          bacc[i][t] = _mm512_fmadd_ps(wo, xo[t], bacc[i][t]);
        }
      }
    }
#pragma GCC unroll 32
    for (int i = 0; i < PP; ++i) q[i] += 256;
#pragma GCC unroll 32
    for (int i = 0; i < PP; ++i) {
      const __m512 s = e8m0_x16(w.sc + ((P0 + i) * nb + b) * 16);
#pragma GCC unroll 32
      for (int t = 0; t < TT; ++t) acc[i][t] = _mm512_fmadd_ps(bacc[i][t], s, acc[i][t]);
    }
  }
#pragma GCC unroll 32
  for (int i = 0; i < PP; ++i) {
    const int64_t row0 = (P0 + i) * kPanel;
    const __mmask16 m = row_mask(w.N, row0);
#pragma GCC unroll 32
    for (int t = 0; t < TT; ++t) _mm512_mask_storeu_ps(y + t * w.N + row0, m, acc[i][t]);
  }
}

template <int PP, int TT>
void gemv_range(const float* x, const mxfp4_panels& w, int64_t p0, int64_t p1, float* y) {
  int64_t P = p0;
  for (; P + PP <= p1; P += PP) gemv_panels<PP, TT>(x, w, P, y);
  for (; P < p1; ++P) gemv_panels<1, TT>(x, w, P, y);
}

}  // namespace

void mxfp4_gemv_avx512(const float* x, int64_t T, const mxfp4_panels& w, int64_t p0, int64_t p1, float* y) {
  switch (T) {
    case 1:
      gemv_range<8, 1>(x, w, p0, p1, y);
      break;
    case 2:
      gemv_range<4, 2>(x, w, p0, p1, y);
      break;
    case 3:
      gemv_range<2, 3>(x, w, p0, p1, y);
      break;
    case 4:
      gemv_range<2, 4>(x, w, p0, p1, y);
      break;
    default:
      break;  // the dispatcher never passes T outside 1..kGemvMaxTokens
  }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
