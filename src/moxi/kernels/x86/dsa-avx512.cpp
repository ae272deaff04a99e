// DSA lightning-indexer scores on AVX-512 F: ref::indexer_scores with 16 keys in the vector lanes. Each
// 16-key block is transposed once ([D][16], shared by every query and head); each lane then sums q_j[d] *
// k_s[d] over d in order, applies std::max(dot, 0)'s comparison and adds w_j * relu over heads j in order:
// the reference's operations in its order, without FMA contraction (-ffp-contract=off), so the scores are
// bit-identical to it (tests/kernels/backend-ops-test.cpp).
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt); called only after
// kernels::x86::cpu() confirmed them. Only intrinsics and C headers are included; scratch comes from the
// caller.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>
#include <limits>

namespace moxi::kernels::x86 {

// q f32 [T, HI, D], k f32 [S, D], w f32 [T, HI], scores f32 [T, S]; kt scratch f32 [D * 16].
void indexer_scores_avx512(const float* q, const float* k, const float* w, float* scores, int64_t T,
                           int64_t S, int64_t HI, int64_t D, float* kt) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 zero = _mm512_setzero_ps();
  for (int64_t s0 = 0; s0 < S; s0 += 16) {
    const int64_t nb = S - s0 < 16 ? S - s0 : 16;
    for (int64_t i = 0; i < 16; ++i)
      for (int64_t d = 0; d < D; ++d) kt[d * 16 + i] = i < nb ? k[(s0 + i) * D + d] : 0.0f;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t n = S - T + t + 1;  // keys visible to query t
      __m512 acc = zero;
      for (int64_t j = 0; j < HI; ++j) {
        const float* qj = q + (t * HI + j) * D;
        __m512 dot = zero;
        for (int64_t d = 0; d < D; ++d)
          dot = _mm512_add_ps(dot, _mm512_mul_ps(_mm512_set1_ps(qj[d]), _mm512_loadu_ps(kt + d * 16)));
        const __m512 relu = _mm512_mask_mov_ps(dot, _mm512_cmp_ps_mask(dot, zero, _CMP_LT_OQ), zero);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_set1_ps(w[t * HI + j]), relu));
      }
      // Lanes s >= n are -inf (not causal for this query); lanes past S are not stored.
      const int64_t vis = n - s0;
      const __mmask16 visible = vis >= 16  ? __mmask16(0xFFFF)
                                : vis <= 0 ? __mmask16(0)
                                           : __mmask16((1u << vis) - 1);
      const __mmask16 store = nb >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nb) - 1);
      _mm512_mask_storeu_ps(scores + t * S + s0, store, _mm512_mask_mov_ps(ninf, visible, acc));
    }
  }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
