// DSA lightning-indexer scores on AVX-512 F: ref::indexer_scores with 16 keys in the vector lanes. Each
// 16-key block of FP8 key rows is decoded once into f32 code values laid out [D][16] (shared by every query
// and head) plus the 16 scales; each lane then runs the reference's chain dot = fma(q_j[d], c[d], dot) over
// d in order, multiplies by its key's scale, applies std::max(v, 0)'s comparison and adds fma(w_j, relu,
// acc) over heads j in order: the reference's operations in its order (-ffp-contract=off keeps the compiler
// from fusing anything else), so the scores are bit-identical to it (tests/kernels/backend-ops-test.cpp).
// Eight (query, head) dot products run at once, so that the FMAs' latency is hidden (one chain alone waits
// on each), and a key block that no query of the call sees is skipped.
//
// Decoding a block (decode_block_full, 16 keys and D a multiple of 4): the 16 rows' code bytes are
// transposed as 32-bit words (a 16 x 16 register transpose puts 4 dimensions of all 16 keys in one vector),
// and each code becomes its fp32 value by integer shifts and a mask (its sign and 7 magnitude bits placed
// where fp32 keeps them, so the bits read as the value times 2^-120) and one exact multiply by 2^120: four
// instructions per dimension of 16 keys, no table and no CPU feature past AVX-512 F. (A VPERMI2B table
// lookup of AVX512-VBMI, tried before, ran no faster.) A partial block or another D decodes through
// mx::kFp8E4m3 one code at a time.
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt); called only after
// kernels::x86::cpu() confirmed them. Scratch comes from the caller.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "moxi/base/mx.h"
#include "moxi/kernels/ref/dsa.h"

namespace moxi::kernels::x86 {
namespace {

// N independent dot products of 16 keys (kt f32 [D][16]) with the query-head rows qp[c] f32 [D]: each a
// chain of FMAs over d in order, as the reference sums; N chains in flight hide the FMA latency.
template <int N>
void dots(const float* const* qp, const float* kt, int64_t D, __m512* out) {
  __m512 acc[N];
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const __m512 kv = _mm512_loadu_ps(kt + d * 16);
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(qp[c][d]), kv, acc[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) out[c] = acc[c];
}

constexpr int kChains = 8;

// dots<N> over two key blocks at once (ktA, ktB f32 [D][16]): 2N independent chains sharing each query
// broadcast, for calls with few (query, head) pairs (a decode step: one query), whose N chains alone would
// wait on the FMA latency.
template <int N>
void dots2(const float* const* qp, const float* ktA, const float* ktB, int64_t D, __m512* outA,
           __m512* outB) {
  __m512 a[N], b[N];
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) a[c] = b[c] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const __m512 ka = _mm512_loadu_ps(ktA + d * 16), kb = _mm512_loadu_ps(ktB + d * 16);
#pragma GCC unroll 4
    for (int c = 0; c < N; ++c) {
      const __m512 qv = _mm512_set1_ps(qp[c][d]);
      a[c] = _mm512_fmadd_ps(qv, ka, a[c]);
      b[c] = _mm512_fmadd_ps(qv, kb, b[c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < N; ++c) {
    outA[c] = a[c];
    outB[c] = b[c];
  }
}

inline __m512 lo_pd(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
inline __m512 hi_pd(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// 16 x 16 transpose of 32-bit lanes: out[c] lane i = r[i] lane c (unpack ps, unpack pd, two 128-bit
// shuffles: 64 shuffles instead of 256 scalar moves). r is clobbered.
inline void transpose16(__m512* r, __m512* out) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // r[4q + c]: rows 4q..4q+3 of columns c, c + 4, c + 8, c + 12 (one per 128-bit group).
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    r[4 * q + 0] = lo_pd(t[4 * q], t[4 * q + 2]);
    r[4 * q + 1] = hi_pd(t[4 * q], t[4 * q + 2]);
    r[4 * q + 2] = lo_pd(t[4 * q + 1], t[4 * q + 3]);
    r[4 * q + 3] = hi_pd(t[4 * q + 1], t[4 * q + 3]);
  }
  // t[c] (c < 4): rows 0-7 of columns c and c + 8; t[c + 4]: of c + 4 and c + 12; t[8 + ...]: rows 8-15.
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    t[c] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88);
    t[c + 4] = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xdd);
    t[8 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88);
    t[12 + c] = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xdd);
  }
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    out[c] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88);
    out[c + 8] = _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd);
  }
}

// kt f32 [D][16] = the code values of a full block of 16 key rows (stride bytes apart), D % 4 == 0.
void decode_block_full(const uint8_t* k, int64_t stride, int64_t D, float* kt) {
  // An E4M3 code s eeee mmm placed as fp32 bits s 0000eeee mmm0... is its value times 2^-120 (an fp32
  // subnormal when eeee = 0, as the E4M3 subnormals are): the same exponent field and mantissa top bits,
  // the bias 127 in place of 7. Multiplying by 2^120 is exact. Codes 0x7F and 0xFF (E4M3 NaN) are never
  // stored: the codec writes a NaN or Inf key as zero codes with a NaN scale.
  const __m512i keep = _mm512_set1_epi32(int(0x87F00000u));  // the sign and the 7 magnitude bits
  const __m512 up = _mm512_set1_ps(0x1p120f);
  for (int64_t c0 = 0; c0 < D; c0 += 64) {
    const int64_t n = D - c0 < 64 ? D - c0 : 64;
    const __mmask64 load = n == 64 ? ~__mmask64(0) : (__mmask64(1) << n) - 1;
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i)
      r[i] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi8(load, k + i * stride + c0));
    transpose16(r, t);  // t[c] lane i: key i's codes c0 + 4c .. c0 + 4c + 3, one per byte
    // Unrolled with constant indices, so that t stays in registers.
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c) {
      if (4 * c >= n) break;
      const __m512i codes = _mm512_castps_si512(t[c]);
      float* out = kt + (c0 + 4 * c) * 16;
      // Code b to the top byte, then an arithmetic shift by 4: the sign fills bits 27-31, the magnitude
      // lands in bits 20-26; the mask keeps bit 31 and bits 20-26.
#pragma GCC unroll 4
      for (int b = 0; b < 4; ++b) {
        const __m512i top = b == 3 ? codes : _mm512_slli_epi32(codes, unsigned(24 - 8 * b));
        const __m512i bits = _mm512_and_si512(_mm512_srai_epi32(top, 4), keep);
        _mm512_storeu_ps(out + b * 16, _mm512_mul_ps(_mm512_castsi512_ps(bits), up));
      }
    }
  }
}

// kt f32 [D][16] = the code values of the nb keys (lanes past nb zero), one at a time.
void decode_block_scalar(const uint8_t* k, int64_t stride, int64_t nb, int64_t D, float* kt) {
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t d = 0; d < D; ++d) kt[d * 16 + i] = i < nb ? mx::kFp8E4m3[k[i * stride + d]] : 0.0f;
}

void dots2_n(int n, const float* const* qp, const float* ktA, const float* ktB, int64_t D, __m512* outA,
             __m512* outB) {
  switch (n) {
    case 1:
      return dots2<1>(qp, ktA, ktB, D, outA, outB);
    case 2:
      return dots2<2>(qp, ktA, ktB, D, outA, outB);
    case 3:
      return dots2<3>(qp, ktA, ktB, D, outA, outB);
    default:
      return dots2<4>(qp, ktA, ktB, D, outA, outB);
  }
}

inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// kt f32 [D][16] and the scales of the nb keys of a block starting at kb (lanes past nb: zero).
__m512 decode_block(const uint8_t* kb, int64_t stride, int64_t nb, int64_t D, float* kt) {
  if (nb == 16 && D % 4 == 0)
    decode_block_full(kb, stride, D, kt);
  else
    decode_block_scalar(kb, stride, nb, D, kt);
  // The scales in one gather (16 scalar stores and a vector load of them would stall on store forwarding).
  const __m512i at = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(int(stride)));
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes(nb), at, kb + ref::index_key_scale_offset(D), 1);
}

// Adds (query, head) pair `pair` = t * HI + j, its dot products with the block of keys at s0, into the
// query's acc as the reference does (acc = fma(w_j, relu(dot * scale), acc), restarted at head 0); after the
// last head stores the query's scores: -inf in the lanes past its last visible key, nothing past `store`.
inline void add_pair(__m512 dot, __m512 scale, const float* w, float* scores, int64_t T, int64_t S,
                     int64_t HI, int64_t s0, __mmask16 store, int64_t pair, __m512& acc) {
  const __m512 zero = _mm512_setzero_ps();
  const int64_t t = pair / HI, j = pair % HI;
  if (j == 0) acc = zero;
  const __m512 v = _mm512_mul_ps(dot, scale);
  const __m512 relu = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
  acc = _mm512_fmadd_ps(_mm512_set1_ps(w[pair]), relu, acc);
  if (j + 1 < HI) return;
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  _mm512_mask_storeu_ps(scores + t * S + s0, store, _mm512_mask_mov_ps(ninf, lanes(S - T + t + 1 - s0), acc));
}

// Scores of the nb keys of the block at s0 from the dot products of all T * HI pairs with them.
void store_scores(const __m512* dot, __m512 scale, const float* w, float* scores, int64_t T, int64_t S,
                  int64_t HI, int64_t s0, int64_t nb) {
  const __mmask16 store = lanes(nb);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t c = 0; c < T * HI; ++c) add_pair(dot[c], scale, w, scores, T, S, HI, s0, store, c, acc);
}

void dots_n(int n, const float* const* qp, const float* kt, int64_t D, __m512* out) {
  switch (n) {
    case 1:
      return dots<1>(qp, kt, D, out);
    case 2:
      return dots<2>(qp, kt, D, out);
    case 3:
      return dots<3>(qp, kt, D, out);
    case 4:
      return dots<4>(qp, kt, D, out);
    case 5:
      return dots<5>(qp, kt, D, out);
    case 6:
      return dots<6>(qp, kt, D, out);
    case 7:
      return dots<7>(qp, kt, D, out);
    default:
      return dots<8>(qp, kt, D, out);
  }
}

}  // namespace

// q f32 [T, HI, D], k u8 [S, ref::index_key_bytes(D)], w f32 [T, HI], scores f32 [T, S]: the score columns
// of keys [s_begin, s_end) (s_begin a multiple of 16); kt scratch f32 [D * 32].
void indexer_scores_avx512(const float* q, const uint8_t* k, const float* w, float* scores, int64_t T,
                           int64_t S, int64_t HI, int64_t D, float* kt, int64_t s_begin, int64_t s_end) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 zero = _mm512_setzero_ps();
  const int64_t stride = ref::index_key_bytes(D);
  if (2 * T * HI <= kChains) {
    // Few pairs (a decode step): two blocks at a time, every pair against both (lanes a query does not see
    // are masked to -inf at the store, so nothing is skipped).
    const int n = int(T * HI);
    const float* qp[kChains];
    for (int c = 0; c < n; ++c) qp[c] = q + c * D;
    float* ktB = kt + D * 16;
    for (int64_t s0 = s_begin; s0 < s_end; s0 += 32) {
      const int64_t nbA = s_end - s0 < 16 ? s_end - s0 : 16, nbB = s_end - s0 - 16;
      __m512 dA[kChains / 2], dB[kChains / 2];
      const __m512 scA = decode_block(k + s0 * stride, stride, nbA, D, kt);
      if (nbB <= 0) {
        dots_n(n, qp, kt, D, dA);
        store_scores(dA, scA, w, scores, T, S, HI, s0, nbA);
        continue;
      }
      const __m512 scB = decode_block(k + (s0 + 16) * stride, stride, nbB < 16 ? nbB : 16, D, ktB);
      dots2_n(n, qp, kt, ktB, D, dA, dB);
      store_scores(dA, scA, w, scores, T, S, HI, s0, nbA);
      store_scores(dB, scB, w, scores, T, S, HI, s0 + 16, nbB < 16 ? nbB : 16);
    }
    return;
  }
  for (int64_t s0 = s_begin; s0 < s_end; s0 += 16) {
    const int64_t nb = s_end - s0 < 16 ? s_end - s0 : 16;
    const __mmask16 store = lanes(nb);
    // Queries that see none of these keys (t < first) get -inf and no work.
    const int64_t first = s0 - (S - T) < 0 ? 0 : s0 - (S - T);
    for (int64_t t = 0; t < first && t < T; ++t) _mm512_mask_storeu_ps(scores + t * S + s0, store, ninf);
    if (first >= T) continue;
    const __m512 scale = decode_block(k + s0 * stride, stride, nb, D, kt);
    // The (query, head) pairs of the visible queries in order, kChains dot products at a time; each
    // query's heads are then added in order (acc = fma(w_j, relu(dot_j * scale), acc)), as the reference.
    const int64_t pairs = (T - first) * HI;
    __m512 acc = zero;
    for (int64_t p0 = 0; p0 < pairs; p0 += kChains) {
      const int n = pairs - p0 < kChains ? int(pairs - p0) : kChains;
      const float* qp[kChains];
      for (int c = 0; c < n; ++c) qp[c] = q + (first * HI + p0 + c) * D;
      __m512 dot[kChains];
      dots_n(n, qp, kt, D, dot);
      for (int c = 0; c < n; ++c)
        add_pair(dot[c], scale, w, scores, T, S, HI, s0, store, first * HI + p0 + c, acc);
    }
  }
}

// The first position in [from, to) whose score ranks before a current k-th best score `thr`
// (ref::indexer_ranks_before, at a later position than it): greater than thr, or any non-NaN score when thr
// is NaN. `to` when none does. 16 scores per compare.
int64_t indexer_next_above_avx512(const float* row, int64_t from, int64_t to, float thr) {
  const bool thr_nan = thr != thr;
  const __m512 t = _mm512_set1_ps(thr);
  int64_t s = from;
  for (; s + 16 <= to; s += 16) {
    const __m512 v = _mm512_loadu_ps(row + s);
    const __mmask16 m = thr_nan ? _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q) : _mm512_cmp_ps_mask(v, t, _CMP_GT_OQ);
    if (m) return s + __builtin_ctz(unsigned(m));
  }
  for (; s < to; ++s) {
    const float v = row[s];
    if (thr_nan ? v == v : v > thr) return s;
  }
  return to;
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
