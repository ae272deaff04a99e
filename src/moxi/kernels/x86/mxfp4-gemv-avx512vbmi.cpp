// The BF16 decode GEMV of mxfp4-gemm-avx512bf16.cpp with a cheaper weight decode for CPUs that also have
// AVX512-VBMI (Zen 4, Ice Lake and later). Per 64-byte load (4 K-pairs x 16 rows of the panel-16 layout) one
// VPSRLW puts every byte's high nibble in its low bits; then per K-pair ONE VPERMI2B gathers, for each row,
// the byte (low nibble) into the row's low word and the shifted byte (high nibble) into its high word, one
// VPERMW maps both codes to bf16, one VDPBF16PS multiplies: 3 instructions per 16 rows x K-pair instead of
// 5 (widen, shift, ternary logic, VPERMW, VDPBF16PS). VPERMW reads only the low 5 bits of each word, so the
// other nibble's bit that lands in bit 4 is harmless: the 32-entry table repeats its 16 codes.
// Same bf16 weights, same VDPBF16PS order, same block-scale FMA: bit-identical to mxfp4_gemv_avx512bf16.
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vbmi (kernels/CMakeLists.txt);
// called only after kernels::x86::cpu() confirmed them.
#if defined(__x86_64__)
#include <immintrin.h>

#include "moxi/kernels/x86/mxfp4-avx512-inl.h"
#include "moxi/kernels/x86/mxfp4-x86.h"

namespace moxi::kernels::x86 {
namespace {

inline __m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh&>(v);
}

// VPERMI2B indexes over [src | src >> 4] (128 bytes) for K-pair p of a 64-byte chunk: row r's dword gets
// src byte 16p + r in byte 0 (low nibble code) and (src >> 4) byte 16p + r in byte 2 (high nibble code).
inline __m512i pair_index(int p) {
  alignas(64) uint8_t idx[64];
  for (int r = 0; r < 16; ++r) {
    idx[4 * r + 0] = uint8_t(16 * p + r);
    idx[4 * r + 1] = uint8_t(16 * p + r);
    idx[4 * r + 2] = uint8_t(64 + 16 * p + r);
    idx[4 * r + 3] = uint8_t(64 + 16 * p + r);
  }
  return _mm512_load_si512(idx);
}

template <int PP, int TT>
void gemv_panels(const uint16_t* xb, const mxfp4_panels& w, int64_t P0, float* y, const __m512i* index) {
  const int64_t K = w.K, half = K / 2, nb = K / 32;
  // FP4 code -> bf16 for codes 0-15, repeated for 16-31 (bit 4 of a word index is the other nibble's).
  const __m512i table =
      _mm512_setr_epi32(0x3F000000, 0x3FC03F80, 0x40404000, 0x40C04080, int(0xBF008000u), int(0xBFC0BF80u),
                        int(0xC040C000u), int(0xC0C0C080u), 0x3F000000, 0x3FC03F80, 0x40404000, 0x40C04080,
                        int(0xBF008000u), int(0xBFC0BF80u), int(0xC040C000u), int(0xC0C0C080u));
  const int32_t* xp = reinterpret_cast<const int32_t*>(xb);
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
#pragma GCC unroll 4
    for (int jj = 0; jj < 16; jj += 4) {
#pragma GCC unroll 32
      for (int i = 0; i < PP; ++i) {
        const __m512i src = _mm512_loadu_si512(q[i]);
        q[i] += 64;
        const __m512i hi = _mm512_srli_epi16(src, 4);
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
          const __m512i codes = _mm512_permutex2var_epi8(src, index[p], hi);
          const __m512bh wv = as_bh(_mm512_permutexvar_epi16(codes, table));
#pragma GCC unroll 32
          for (int t = 0; t < TT; ++t)
            bacc[i][t] =
                _mm512_dpbf16_ps(bacc[i][t], wv, as_bh(_mm512_set1_epi32(xp[t * half + b * 16 + jj + p])));
        }
      }
    }
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
void gemv_range(const uint16_t* xb, const mxfp4_panels& w, int64_t p0, int64_t p1, float* y) {
  const __m512i index[4] = {pair_index(0), pair_index(1), pair_index(2), pair_index(3)};
  int64_t P = p0;
  for (; P + PP <= p1; P += PP) gemv_panels<PP, TT>(xb, w, P, y, index);
  for (; P < p1; ++P) gemv_panels<1, TT>(xb, w, P, y, index);
}

}  // namespace

void mxfp4_gemv_avx512vbmi(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t p0, int64_t p1,
                           float* y) {
  switch (T) {
    case 1:
      gemv_range<8, 1>(xb, w, p0, p1, y);
      break;
    case 2:
      gemv_range<4, 2>(xb, w, p0, p1, y);
      break;
    case 3:
      gemv_range<2, 3>(xb, w, p0, p1, y);
      break;
    case 4:
      gemv_range<2, 4>(xb, w, p0, p1, y);
      break;
    default:
      break;  // the dispatcher never passes T outside 1..kGemvMaxTokens
  }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
