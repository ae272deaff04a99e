// AVX-512 building blocks shared by the MXFP4 kernels (the GEMVs, the BF16 GEMM and the AMX GEMM's weight
// decode): the E2M1 lookup table, the exact E8M0 scale, the row mask of a panel and the decode of a
// panel's K-range into bf16 pairs. Include it ONLY from translation units built with at least
// -mavx512f -mavx512bw (kernels/CMakeLists.txt). Internal linkage on purpose: each including TU gets its
// own copy compiled with its own -m flags, so the linker can never pick a copy built for a richer ISA
// for code that runs on a poorer one.
#pragma once

#if !defined(__AVX512F__) || !defined(__AVX512BW__)
#error "mxfp4-avx512-inl.h needs a translation unit built with -mavx512f -mavx512bw"
#endif

#include <immintrin.h>

#include <cstdint>

#include "moxi/kernels/x86/mxfp4-x86.h"

namespace moxi::kernels::x86 {
namespace {

// The 16 E2M1 values, indexed by the 4-bit code (bit 3 = sign).
inline __m512 fp4_table() {
  return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                        -3.0f, -4.0f, -6.0f);
}

// 16 E8M0 bytes -> their exact fp32 values (mx::kE8m0): byte << 23 is 2^(s-127) for 1..254; 0 is 2^-127
// (an fp32 subnormal, not 0) and 255 is NaN, patched with two masked moves.
inline __m512 e8m0_x16(const uint8_t* s) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s)));
  __m512i f = _mm512_slli_epi32(v, 23);
  f = _mm512_mask_mov_epi32(f, _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512()),
                            _mm512_set1_epi32(0x00400000));
  f = _mm512_mask_mov_epi32(f, _mm512_cmpeq_epi32_mask(v, _mm512_set1_epi32(255)),
                            _mm512_set1_epi32(0x7fc00000));
  return _mm512_castsi512_ps(f);
}

// Lanes of the panel starting at row0 that are real rows (< N); the last panel is zero-padded.
inline __mmask16 row_mask(int64_t N, int64_t row0) {
  const int64_t n = N - row0;
  return n <= 0 ? __mmask16(0) : n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// Decodes pairs [kc/2, (kc+kn)/2) of panel P (kc, kn multiples of 32) into out[pair * stride + r] u32 words
// for its 16 rows r, each (bf16 of element 2p) | (bf16 of element 2p+1) << 16: the operand order VDPBF16PS
// and TDPBF16PS pair. The value is E2M1 x E8M0 in fp32 (exact: <= 2 significant bits; 0 x NaN-scale stays
// NaN) and its bf16 is the upper half (exact, the low half is zero); fp32-subnormal products (scale bytes
// < 3) become bf16 subnormals that the dot-product instructions read as zero, the documented deviation.
inline void decode_panel_bf16(const mxfp4_panels& w, int64_t P, int64_t kc, int64_t kn, uint32_t* out,
                              int64_t stride) {
  const __m512 table = fp4_table();
  const __m512i hi_mask = _mm512_set1_epi32(int(0xFFFF0000u));
  const int64_t nb = w.K / 32;
  const uint8_t* q = w.qs + (P * (w.K / 8) + kc / 8) * 64;
  for (int64_t b = kc / 32; b < (kc + kn) / 32; ++b) {
    const __m512 s = e8m0_x16(w.sc + (P * nb + b) * 16);
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i v = _mm512_loadu_si512(q);
      q += 64;
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {  // VPERMPS reads index bits 0-3: K-pair 4g + j's even, then odd code
        const __m512 we = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4 * j), table), s);
        const __m512 wo = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 16 + 4 * j), table), s);
        // (wo & 0xFFFF0000) | (we >> 16): ternary-logic truth table (A & B) | C = 0xEA.
        const __m512i d = _mm512_ternarylogic_epi32(_mm512_castps_si512(wo), hi_mask,
                                                    _mm512_srli_epi32(_mm512_castps_si512(we), 16), 0xEA);
        _mm512_storeu_si512(out, d);
        out += stride;
      }
    }
  }
}

}  // namespace
}  // namespace moxi::kernels::x86
