// MXFP4 prefill GEMM on AVX-512 BF16 (VDPBF16PS) over the panel-16 layout. Per panel pair (32 rows) and
// K-chunk the weights are decoded once, scale folded in, into bf16 pairs (the decode is exact: an E2M1
// value times a power of two has <= 2 significant bits), then a 12-token x 32-row register tile of
// 24 accumulators consumes them, each VDPBF16PS taking one broadcast x pair. Activations arrive as bf16.
//
// Blocking (per thread, which owns a range of panel pairs): token blocks of kTb, K-chunks of kKc; the
// x chunk (kTb x kKc bf16, 384 KiB) and the decoded weights (32 x kKc bf16, 64 KiB) stay in L2 while y
// tiles accumulate across chunks.
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16; same single-header rule as the GEMV.
#if defined(__x86_64__)
#include <immintrin.h>

#include "moxi/kernels/x86/mxfp4-avx512-inl.h"
#include "moxi/kernels/x86/mxfp4-x86.h"
#include "moxi/kernels/x86/peak-loop-inl.h"

namespace moxi::kernels::x86 {
namespace {

constexpr int64_t kKc = 1024;  // K-chunk (multiple of 32)
constexpr int kTm = 12;        // tokens per register tile: 24 accumulators + 2 weight registers
constexpr int64_t kTb = 16 * kTm;

inline __m512bh as_bh(__m512i v) {
  return reinterpret_cast<__m512bh&>(v);
}

// acc[t][h] (+)= sum over npairs of x[t] pair . w pair for the 32 rows of a panel pair; y tile masked.
template <int TM>
void micro(const uint16_t* xb, int64_t K, const uint32_t* wd, int64_t npairs, float* y, int64_t N,
           int64_t row0, bool accumulate, __mmask16 ma, __mmask16 mb) {
  __m512 acc[TM][2];
#pragma GCC unroll 32
  for (int t = 0; t < TM; ++t) {
    acc[t][0] = accumulate ? _mm512_maskz_loadu_ps(ma, y + t * N + row0) : _mm512_setzero_ps();
    acc[t][1] = accumulate ? _mm512_maskz_loadu_ps(mb, y + t * N + row0 + 16) : _mm512_setzero_ps();
  }
  const int32_t* xp = reinterpret_cast<const int32_t*>(xb);  // bf16 pairs; xb rows are 4-byte aligned
  const int64_t ld = K / 2;
  for (int64_t p = 0; p < npairs; ++p) {
    const __m512bh wa = as_bh(_mm512_loadu_si512(wd + p * 32));
    const __m512bh wb = as_bh(_mm512_loadu_si512(wd + p * 32 + 16));
#pragma GCC unroll 32
    for (int t = 0; t < TM; ++t) {
      const __m512bh xv = as_bh(_mm512_set1_epi32(xp[t * ld + p]));
      acc[t][0] = _mm512_dpbf16_ps(acc[t][0], wa, xv);
      acc[t][1] = _mm512_dpbf16_ps(acc[t][1], wb, xv);
    }
  }
#pragma GCC unroll 32
  for (int t = 0; t < TM; ++t) {
    _mm512_mask_storeu_ps(y + t * N + row0, ma, acc[t][0]);
    _mm512_mask_storeu_ps(y + t * N + row0 + 16, mb, acc[t][1]);
  }
}

using micro_fn = void (*)(const uint16_t*, int64_t, const uint32_t*, int64_t, float*, int64_t, int64_t, bool,
                          __mmask16, __mmask16);
constexpr micro_fn kMicro[kTm + 1] = {nullptr,  micro<1>, micro<2>, micro<3>,  micro<4>,  micro<5>, micro<6>,
                                      micro<7>, micro<8>, micro<9>, micro<10>, micro<11>, micro<12>};

// GEMV on bf16 activations: one 64-byte load holds 4 K-pairs of 16 rows (mxfp4-x86.h); a shift of its 16-bit
// halves by 4j puts K-pair j's even code in each row's low word and its odd code in the high word, one VPERMW
// turns both into bf16 (exact; it reads 5 index bits, so the 32-entry table repeats the 16 codes for the
// next nibble's low bit), and one VDPBF16PS per token does the row's two multiply-adds. Per 16 rows x K-pair
// that is one shift, one lookup and one dot product: no widening, no byte shuffle.
template <int PP, int TT>
void gemv_bf16_panels(const uint16_t* xb, const mxfp4_panels& w, int64_t P0, float* y) {
  const int64_t K = w.K, half = K / 2, nb = K / 32;
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
    for (int g = 0; g < 4; ++g) {
#pragma GCC unroll 32
      for (int i = 0; i < PP; ++i) {
        const __m512i src = _mm512_loadu_si512(q[i]);
        q[i] += 64;
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const __m512i codes = j == 0 ? src : _mm512_srli_epi16(src, 4 * j);
          const __m512bh wv = as_bh(_mm512_permutexvar_epi16(codes, table));
#pragma GCC unroll 32
          for (int t = 0; t < TT; ++t)
            bacc[i][t] =
                _mm512_dpbf16_ps(bacc[i][t], wv, as_bh(_mm512_set1_epi32(xp[t * half + b * 16 + 4 * g + j])));
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
void gemv_bf16_range(const uint16_t* xb, const mxfp4_panels& w, int64_t p0, int64_t p1, float* y) {
  int64_t P = p0;
  for (; P + PP <= p1; P += PP) gemv_bf16_panels<PP, TT>(xb, w, P, y);
  for (; P < p1; ++P) gemv_bf16_panels<1, TT>(xb, w, P, y);
}

}  // namespace

void mxfp4_gemv_avx512bf16(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t p0, int64_t p1,
                           float* y) {
  switch (T) {
    case 1:
      gemv_bf16_range<8, 1>(xb, w, p0, p1, y);
      break;
    case 2:
      gemv_bf16_range<4, 2>(xb, w, p0, p1, y);
      break;
    case 3:
      gemv_bf16_range<2, 3>(xb, w, p0, p1, y);
      break;
    case 4:
      gemv_bf16_range<2, 4>(xb, w, p0, p1, y);
      break;
    default:
      break;  // the dispatcher never passes T outside 1..kGemvMaxTokens
  }
}

void f32_to_bf16_avx512bf16(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(v));
  }
}

double avx512bf16_peak_loop(int64_t iters) {
  // The VDPBF16PS issue rate, the ceiling the GEMM's inner loop is measured against.
  const __m512bh a = as_bh(_mm512_set1_epi32(0x3f803f80)), b = as_bh(_mm512_set1_epi32(0x00010001));
  return register_peak_loop(iters, [&](__m512 acc) { return _mm512_dpbf16_ps(acc, a, b); });
}

int64_t mxfp4_gemm_scratch_u32() {
  return (kKc / 2) * 32;
}

void mxfp4_gemm_avx512bf16(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t pp0, int64_t pp1,
                           float* y, uint32_t* scratch) {
  const int64_t K = w.K, N = w.N, panels = w.panels();
  for (int64_t tb = 0; tb < T; tb += kTb) {
    const int64_t tn = T - tb < kTb ? T - tb : kTb;
    for (int64_t kc = 0; kc < K; kc += kKc) {
      const int64_t kn = K - kc < kKc ? K - kc : kKc;
      for (int64_t pp = pp0; pp < pp1; ++pp) {
        const int64_t P = 2 * pp;
        decode_panel_bf16(w, P, kc, kn, scratch, 32);
        if (P + 1 < panels) {
          decode_panel_bf16(w, P + 1, kc, kn, scratch + 16, 32);
        } else {
          for (int64_t p = 0; p < kn / 2; ++p)
            _mm512_storeu_si512(scratch + p * 32 + 16, _mm512_setzero_si512());
        }
        const int64_t row0 = P * kPanel;
        const __mmask16 ma = row_mask(N, row0), mb = row_mask(N, row0 + 16);
        for (int64_t t0 = tb; t0 < tb + tn; t0 += kTm) {
          const int64_t tm = tb + tn - t0 < kTm ? tb + tn - t0 : kTm;
          kMicro[tm](xb + t0 * K + kc, K, scratch, kn / 2, y + t0 * N, N, row0, kc > 0, ma, mb);
        }
      }
    }
  }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
