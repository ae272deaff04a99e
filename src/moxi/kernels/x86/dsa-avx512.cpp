// DSA lightning-indexer scores on AVX-512 F: ref::indexer_scores with 16 keys in the vector lanes. Each
// 16-key block is transposed once ([D][16], shared by every query and head); each lane then sums q_j[d] *
// k_s[d] over d in order, applies std::max(dot, 0)'s comparison and adds w_j * relu over heads j in order:
// the reference's operations in its order, without FMA contraction (-ffp-contract=off), so the scores are
// bit-identical to it (tests/kernels/backend-ops-test.cpp). Eight (query, head) dot products run at once,
// so that the adds' latency is hidden (one chain alone waits on each add), and a key block that no query of
// the call sees is skipped.
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt); called only after
// kernels::x86::cpu() confirmed them. Only intrinsics and C headers are included; scratch comes from the
// caller.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <limits>

namespace moxi::kernels::x86 {
namespace {

// N independent dot products of 16 keys (kt f32 [D][16]) with the query-head rows qp[c] f32 [D]: each a
// chain of mul then add over d in order, as the reference sums; N chains in flight hide the add latency
// (one chain waits ~4 cycles per d on Zen 4).
template <int N>
void dots(const float* const* qp, const float* kt, int64_t D, __m512* out) {
  __m512 acc[N];
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const __m512 kv = _mm512_loadu_ps(kt + d * 16);
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_set1_ps(qp[c][d]), kv));
  }
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) out[c] = acc[c];
}

constexpr int kChains = 8;

inline __m512 lo_pd(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
inline __m512 hi_pd(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// kt f32 [D][16] = the nb keys k f32 [nb, D] transposed, lanes past nb zero. A full block with D a multiple
// of 16 goes through 16 x 16 register transposes (unpack ps, unpack pd, two 128-bit shuffles: 64 shuffles
// per tile instead of 256 scalar moves), which a single decode query would otherwise spend most of its
// scan on.
void transpose_keys(const float* k, int64_t nb, int64_t D, float* kt) {
  if (nb < 16 || D % 16 != 0) {
    for (int64_t i = 0; i < 16; ++i)
      for (int64_t d = 0; d < D; ++d) kt[d * 16 + i] = i < nb ? k[i * D + d] : 0.0f;
    return;
  }
  for (int64_t d0 = 0; d0 < D; d0 += 16) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(k + i * D + d0);
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
      _mm512_storeu_ps(kt + (d0 + c) * 16, _mm512_shuffle_f32x4(t[c], t[8 + c], 0x88));
      _mm512_storeu_ps(kt + (d0 + c + 8) * 16, _mm512_shuffle_f32x4(t[c], t[8 + c], 0xdd));
    }
  }
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

// q f32 [T, HI, D], k f32 [S, D], w f32 [T, HI], scores f32 [T, S]: the score columns of keys [s_begin,
// s_end) (s_begin a multiple of 16); kt scratch f32 [D * 16].
void indexer_scores_avx512(const float* q, const float* k, const float* w, float* scores, int64_t T,
                           int64_t S, int64_t HI, int64_t D, float* kt, int64_t s_begin, int64_t s_end) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t s0 = s_begin; s0 < s_end; s0 += 16) {
    const int64_t nb = s_end - s0 < 16 ? s_end - s0 : 16;
    const __mmask16 store = nb >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nb) - 1);
    // Queries that see none of these keys (t < first) get -inf and no work.
    const int64_t first = s0 - (S - T) < 0 ? 0 : s0 - (S - T);
    for (int64_t t = 0; t < first && t < T; ++t) _mm512_mask_storeu_ps(scores + t * S + s0, store, ninf);
    if (first >= T) continue;
    transpose_keys(k + s0 * D, nb, D, kt);
    // The (query, head) pairs of the visible queries in order, kChains dot products at a time; each
    // query's heads are then added in order (acc += w_j * relu(dot_j)), as the reference does.
    const int64_t pairs = (T - first) * HI;
    __m512 acc = zero;
    for (int64_t p0 = 0; p0 < pairs; p0 += kChains) {
      const int n = pairs - p0 < kChains ? int(pairs - p0) : kChains;
      const float* qp[kChains];
      for (int c = 0; c < n; ++c) qp[c] = q + (first * HI + p0 + c) * D;
      __m512 dot[kChains];
      dots_n(n, qp, kt, D, dot);
      for (int c = 0; c < n; ++c) {
        const int64_t pair = first * HI + p0 + c, t = pair / HI, j = pair % HI;
        if (j == 0) acc = zero;
        const __m512 relu = _mm512_mask_mov_ps(dot[c], _mm512_cmp_ps_mask(dot[c], zero, _CMP_LT_OQ), zero);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(w[t * HI + j]), relu));
        if (j + 1 < HI) continue;
        // Lanes s >= n are -inf (not causal for this query); lanes past S are not stored.
        const int64_t vis = S - T + t + 1 - s0;
        const __mmask16 visible = vis >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << vis) - 1);
        _mm512_mask_storeu_ps(scores + t * S + s0, store, _mm512_mask_mov_ps(ninf, visible, acc));
      }
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
