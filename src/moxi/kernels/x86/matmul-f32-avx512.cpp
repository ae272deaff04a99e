// AVX-512 dense matmul y = x W^T (+ bias) for f32 or BF16-stored weights (widened to f32 in registers, so
// every product is exact and only the fp32 summation order differs from ref::matmul / ref::matmul_bf16),
// and for BF16 weights in 16-row panels (the dense layers' layout on this backend), where each output is
// summed in the reference's order.
// Compiled with AVX-512 F/BW/VL/DQ only; called by x86/backend.cpp after CPUID confirmed support. Only
// intrinsics, <cstdint> and an internal-linkage -inl.h are included, so no shared inline function gets an
// AVX-512 body.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "moxi/kernels/x86/peak-loop-inl.h"

namespace moxi::kernels::x86 {
namespace {

inline __m512 load_w(const float* p) {
  return _mm512_loadu_ps(p);
}
inline __m512 load_w(const uint16_t* p) {
  // bf16 bits are the high half of the f32 bits: widen and shift, exact.
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
inline __m512 load_w(const float* p, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, p);
}
inline __m512 load_w(const uint16_t* p, __mmask16 m) {
  const __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

// Horizontal sum in a fixed tree (so an output never depends on the tile it was computed in). GCC 12's
// AVX-512 shuffle intrinsics pass _mm*_undefined_*() as the masked-off source, which -Wuninitialized flags
// as a false positive once inlined; silenced for this TU's intrinsics only.
#pragma GCC diagnostic ignored "-Wuninitialized"
inline float hsum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));  // + the other 256-bit half
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));  // + the neighbouring 128-bit lane
  __m128 x = _mm512_castps512_ps128(v);
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

// R weight rows x TT tokens, each output one zmm of 16 partial sums over K, reduced at the end. The weight
// rows are loaded once per K-step and reused across the TT tokens (R*TT accumulators + R weight registers
// fit the 32 zmm registers for R = 4, TT = 6).
// pf: a later weight panel (same K offsets) to prefetch, or null. A row of a decode-sized matrix is only
// 2-4 KiB, too short for the hardware prefetcher to train on the R interleaved row streams before they end;
// software prefetch two panels ahead took a 1024x1024 BF16 GEMV from ~4 to ~13 GB/s on Zen 4 (one panel
// ahead: ~10.5, four: ~10).
template <class Wt, int R, int TT>
void tile(const float* x, const Wt* w, const float* bias, float* y, int64_t N, int64_t K, int64_t n,
          int64_t t, const Wt* pf) {
  __m512 acc[R][TT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < TT; ++j) acc[r][j] = _mm512_setzero_ps();
  const Wt* wr = w + n * K;
  const float* xr = x + t * K;
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = load_w(wr + r * K + k);
    if (pf)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) _mm_prefetch(reinterpret_cast<const char*>(pf + r * K + k), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < TT; ++j) {
      const __m512 xv = _mm512_loadu_ps(xr + j * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
  if (k < K) {
    const __mmask16 m = __mmask16((1u << (K - k)) - 1);
    __m512 wv[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) wv[r] = load_w(wr + r * K + k, m);
#pragma GCC unroll 8
    for (int j = 0; j < TT; ++j) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, xr + j * K + k);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < TT; ++j)
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float s = hsum(acc[r][j]);
      y[(t + j) * N + n + r] = bias ? s + bias[n + r] : s;
    }
}

template <class Wt, int R>
void tile_tokens(const float* x, const Wt* w, const float* bias, float* y, int64_t N, int64_t K, int64_t n,
                 int64_t t, int64_t tn, const Wt* pf) {
  switch (tn) {
    case 1:
      return tile<Wt, R, 1>(x, w, bias, y, N, K, n, t, pf);
    case 2:
      return tile<Wt, R, 2>(x, w, bias, y, N, K, n, t, pf);
    case 3:
      return tile<Wt, R, 3>(x, w, bias, y, N, K, n, t, pf);
    case 4:
      return tile<Wt, R, 4>(x, w, bias, y, N, K, n, t, pf);
    case 5:
      return tile<Wt, R, 5>(x, w, bias, y, N, K, n, t, pf);
    default:
      return tile<Wt, R, 6>(x, w, bias, y, N, K, n, t, pf);
  }
}

constexpr int64_t kRows = 4, kTokens = 6, kSeqTokens = 2;

template <class Wt>
void matmul_rows(const float* x, const Wt* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K,
                 int64_t n0, int64_t n1) {
  // Tokens in chunks whose activations stay in L2 (~192 KiB) while this thread's rows stream past them; the
  // 4-row weight panel stays in L1 across the chunk's 6-token tiles. At T <= 6 W is read once.
  int64_t chunk = (int64_t(192) << 10) / (K * 4);
  chunk = chunk < kTokens ? kTokens : chunk / kTokens * kTokens;
  for (int64_t tc = 0; tc < T; tc += chunk) {
    const int64_t te = tc + chunk < T ? tc + chunk : T;
    int64_t n = n0;
    // Decode (T <= kSeqTokens): one row at a time, so each thread reads one purely sequential stream (the
    // hardware prefetcher's best case); one FMA chain per output still outruns a core's share of DRAM. Same
    // per-output summation order as the 4-row tiles, so results do not depend on T.
    for (; T > kSeqTokens && n + kRows <= n1; n += kRows) {
      // Prefetch two panels ahead while the first token tile streams this one (later tiles hit the cache).
      const Wt* pf = n + 3 * kRows <= n1 ? w + (n + 2 * kRows) * K : nullptr;
      for (int64_t t = tc; t < te; t += kTokens)
        tile_tokens<Wt, kRows>(x, w, bias, y, N, K, n, t, te - t < kTokens ? te - t : kTokens,
                               t == tc ? pf : nullptr);
    }
    for (; n < n1; ++n) {
      const Wt* pf = n + 2 < n1 ? w + (n + 2) * K : nullptr;  // two rows ahead, as for the panels
      for (int64_t t = tc; t < te; t += kTokens)
        tile_tokens<Wt, 1>(x, w, bias, y, N, K, n, t, te - t < kTokens ? te - t : kTokens,
                           t == tc ? pf : nullptr);
    }
  }
}

// ---- BF16 weights in 16-row panels of K-pairs (kernels::ref::bf16_panel_index: element (n, k) at
// ((n / 16) * K2 + k - k % 2) * 16 + (n % 16) * 2 + k % 2, K2 = K rounded up to even) ----
// The outer-product form of a GEMM micro-kernel: per K-pair, B panels' 64-byte pairs are loaded once and
// split into the 16 weights of k (low halves shifted up) and of k + 1 (high halves masked), each multiplied
// by each of TT tokens' x[t][k] broadcast, so a zmm accumulator holds 16 outputs of one token and no
// horizontal sum is needed. Each output is one FMA chain over k = 0..K-1 in order, whatever B, TT, T or
// the thread split, so results do not depend on the batch (what greedy speculation and the batched forward
// rely on). B = 3 panels x TT = 8 tokens: 24 accumulators, 3 weight registers, 1 broadcast. `moxi bench gemm
// --format bf16` times it beside the row-layout tiles above (1.5x their GFLOP/s at 16 and 512 tokens,
// docs/kernels.md "Dense layers"), whose x loads and horizontal sums cost more than the widening.
inline __m512i load_pair(const uint16_t* p) {
  return _mm512_loadu_si512(p);
}
inline __m512 even_of(__m512i v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
inline __m512 odd_of(__m512i v) {
  return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xFFFF0000u))));
}

template <int B, int TT>
void panel_tile(const float* x, const uint16_t* w, const float* bias, float* y, int64_t N, int64_t K,
                int64_t p, int64_t t, const uint16_t* pf) {
  __m512 acc[B][TT];
#pragma GCC unroll 8
  for (int b = 0; b < B; ++b)
#pragma GCC unroll 8
    for (int j = 0; j < TT; ++j) acc[b][j] = _mm512_setzero_ps();
  const int64_t K2 = K + (K & 1);
  const uint16_t* wp = w + p * K2 * 16;
  const float* xr = x + t * K;
  for (int64_t k = 0; k < K; k += 2) {
    __m512i wv[B];
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) wv[b] = load_pair(wp + (b * K2 + k) * 16);
    // One 64-byte line holds a K-pair of a panel: prefetch a later group's line.
    if (pf)
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b)
        _mm_prefetch(reinterpret_cast<const char*>(pf + (b * K2 + k) * 16), _MM_HINT_T0);
    __m512 we[B];
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) we[b] = even_of(wv[b]);
#pragma GCC unroll 8
    for (int j = 0; j < TT; ++j) {
      const __m512 xv = _mm512_set1_ps(xr[j * K + k]);
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b) acc[b][j] = _mm512_fmadd_ps(we[b], xv, acc[b][j]);
    }
    if (k + 1 == K) break;  // an odd K's last pair holds one column
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) we[b] = odd_of(wv[b]);
#pragma GCC unroll 8
    for (int j = 0; j < TT; ++j) {
      const __m512 xv = _mm512_set1_ps(xr[j * K + k + 1]);
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b) acc[b][j] = _mm512_fmadd_ps(we[b], xv, acc[b][j]);
    }
  }
#pragma GCC unroll 8
  for (int b = 0; b < B; ++b) {
    const int64_t n = (p + b) * 16;
    const __mmask16 m = N - n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (N - n)) - 1);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(m, bias + n) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < TT; ++j) {
      const __m512 v = bias ? _mm512_add_ps(acc[b][j], bv) : acc[b][j];
      _mm512_mask_storeu_ps(y + (t + j) * N + n, m, v);
    }
  }
}

template <int B>
void panel_tokens(const float* x, const uint16_t* w, const float* bias, float* y, int64_t N, int64_t K,
                  int64_t p, int64_t t, int64_t tn, const uint16_t* pf) {
  switch (tn) {
    case 1:
      return panel_tile<B, 1>(x, w, bias, y, N, K, p, t, pf);
    case 2:
      return panel_tile<B, 2>(x, w, bias, y, N, K, p, t, pf);
    case 3:
      return panel_tile<B, 3>(x, w, bias, y, N, K, p, t, pf);
    case 4:
      return panel_tile<B, 4>(x, w, bias, y, N, K, p, t, pf);
    case 5:
      return panel_tile<B, 5>(x, w, bias, y, N, K, p, t, pf);
    case 6:
      return panel_tile<B, 6>(x, w, bias, y, N, K, p, t, pf);
    case 7:
      return panel_tile<B, 7>(x, w, bias, y, N, K, p, t, pf);
    default:
      return panel_tile<B, 8>(x, w, bias, y, N, K, p, t, pf);
  }
}

// Panels per group: three with 8-token tiles (24 accumulators); a decode step (T = 1) takes six (one token
// leaves the registers for six FMA chains: 2-6 % more tokens/s than three on bench-1.5b, where much of the
// weights sits in the L3).
constexpr int64_t kPanelGroup = 3, kDecodePanelGroup = 6, kPanelTokens = 8;

// b panels (b <= 3, or b <= 6 with tn == 1) x tn tokens.
void panel_group(const float* x, const uint16_t* w, const float* bias, float* y, int64_t N, int64_t K,
                 int64_t p, int64_t b, int64_t t, int64_t tn, const uint16_t* pf) {
  switch (b) {
    case 6:
      return panel_tile<6, 1>(x, w, bias, y, N, K, p, t, pf);
    case 5:
      return panel_tile<5, 1>(x, w, bias, y, N, K, p, t, pf);
    case 4:
      return panel_tile<4, 1>(x, w, bias, y, N, K, p, t, pf);
    case 3:
      return panel_tokens<3>(x, w, bias, y, N, K, p, t, tn, pf);
    case 2:
      return panel_tokens<2>(x, w, bias, y, N, K, p, t, tn, pf);
    default:
      return panel_tokens<1>(x, w, bias, y, N, K, p, t, tn, pf);
  }
}

}  // namespace

void matmul_bf16p_avx512(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                         int64_t K, int64_t p0, int64_t p1) {
  // Tokens in chunks whose activations stay in L2 (~192 KiB) while the thread's panel groups stream past
  // them; a group (3 x K x 32 bytes) stays in L2 across the chunk's 8-token tiles.
  const int64_t group = T == 1 ? kDecodePanelGroup : kPanelGroup;
  int64_t chunk = (int64_t(192) << 10) / (K * 4);
  chunk = chunk < kPanelTokens ? kPanelTokens : chunk / kPanelTokens * kPanelTokens;
  for (int64_t tc = 0; tc < T; tc += chunk) {
    const int64_t te = tc + chunk < T ? tc + chunk : T;
    for (int64_t p = p0; p < p1;) {
      const int64_t b = p1 - p < group ? p1 - p : group;
      // Prefetch two groups ahead while the first token tile streams this one (later tiles hit the cache).
      const uint16_t* pf = p + 3 * group <= p1 ? w + (p + 2 * group) * (K + (K & 1)) * 16 : nullptr;
      for (int64_t t = tc; t < te; t += kPanelTokens) {
        const int64_t tn = te - t < kPanelTokens ? te - t : kPanelTokens;
        panel_group(x, w, bias, y, N, K, p, b, t, tn, t == tc ? pf : nullptr);
      }
      p += b;
    }
  }
}

double fma_f32_peak_avx512(int64_t iters) {
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  return register_peak_loop(iters, [&](__m512 acc) { return _mm512_fmadd_ps(acc, a, b); });
}

void matmul_f32_avx512(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N,
                       int64_t K, int64_t n0, int64_t n1) {
  matmul_rows(x, w, bias, y, T, N, K, n0, n1);
}

void matmul_bf16w_avx512(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                         int64_t K, int64_t n0, int64_t n1) {
  matmul_rows(x, w, bias, y, T, N, K, n0, n1);
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
