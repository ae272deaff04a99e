// MLA absorbed attention (dense causal and DSA sparse) on AVX-512 F: the arithmetic of ref::attend_latent,
// element for element and in the same order, vectorized across heads for the scores (lane h sums q_h . row
// over the latent width in order, as the reference's scalar loop does) and across the latent width for the
// weighted sum of rows (each output element adds the rows in the same j order). Products and sums stay
// separate instructions (this file is built with -ffp-contract=off), exp is the same libm call and the
// running max keeps std::max's comparison, so the results are bit-identical to the reference
// (tests/kernels/backend-ops-test.cpp).
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt); called only after
// kernels::x86::cpu() confirmed them. Only intrinsics, C headers and the plain entry-point header are
// included, and scratch comes from the caller: no template of a shared header (std::vector) gets an AVX-512
// body the linker could pick for code that runs on other CPUs.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "moxi/kernels/x86/mla-x86.h"

namespace moxi::kernels::x86 {
namespace {

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// Up to 16 heads [h0, h0 + hn) of one query over the rows idx[0, n): o f32 [hn, L] (row stride L).
void attend_heads(const float* q, int64_t h0, int64_t hn, const float* latent, const int64_t* idx, int64_t n,
                  int64_t L, int64_t Dr, float scale, float* o, const mla_avx512_scratch& s) {
  const int64_t Wl = L + Dr;
  for (int64_t h = 0; h < hn; ++h)
    for (int64_t d = 0; d < L; d += 16)
      _mm512_mask_storeu_ps(o + h * L + d, tail_mask(L - d), _mm512_setzero_ps());
  if (n == 0) return;
  const __mmask16 hm = tail_mask(hn);
  for (int64_t d = 0; d < Wl; ++d)
    for (int64_t h = 0; h < 16; ++h) s.qt[d * 16 + h] = h < hn ? q[(h0 + h) * Wl + d] : 0.0f;
  // Scores: lane h accumulates q_h[d] * row[d] over d in order, then times scale; running max as std::max
  // over j in order. Four rows at a time: one row's chain of dependent adds alone waits on each add, and
  // the rows a sparse query attends lie anywhere in the cache, so the next group's are prefetched.
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const __m512 sc = _mm512_set1_ps(scale);
  auto score = [&](int64_t j, __m512 acc) {
    const __m512 pj = _mm512_mul_ps(acc, sc);
    _mm512_storeu_ps(s.p + j * 16, pj);
    mx = _mm512_mask_mov_ps(mx, _mm512_cmp_ps_mask(mx, pj, _CMP_LT_OQ),
                            pj);  // std::max(mx, p): mx < p ? p : mx
  };
  constexpr int64_t kRows = 4;
  int64_t g = 0;  // rows scored so far
  for (; g + kRows <= n; g += kRows) {
    const float* r[kRows];
    for (int64_t i = 0; i < kRows; ++i) r[i] = latent + idx[g + i] * Wl;
    for (int64_t i = g + kRows; i < g + 2 * kRows && i < n; ++i)
      for (int64_t d = 0; d < Wl; d += 16)
        _mm_prefetch(reinterpret_cast<const char*>(latent + idx[i] * Wl + d), _MM_HINT_T0);
    __m512 acc[kRows] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t d = 0; d < Wl; ++d) {
      const __m512 qd = _mm512_loadu_ps(s.qt + d * 16);
#pragma GCC unroll 4
      for (int64_t i = 0; i < kRows; ++i)
        acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(qd, _mm512_set1_ps(r[i][d])));
    }
    for (int64_t i = 0; i < kRows; ++i) score(g + i, acc[i]);
  }
  for (; g < n; ++g) {
    const float* row = latent + idx[g] * Wl;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t d = 0; d < Wl; ++d)
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(s.qt + d * 16), _mm512_set1_ps(row[d])));
    score(g, acc);
  }
  // Probabilities: exp(p - max) per element (libm, as the reference), sums in j order.
  alignas(64) float m[16], sum[16] = {};
  _mm512_store_ps(m, mx);
  for (int64_t j = 0; j < n; ++j) {
    float* pj = s.p + j * 16;
    for (int64_t h = 0; h < hn; ++h) {
      pj[h] = std::exp(pj[h] - m[h]);
      sum[h] += pj[h];
    }
  }
  // Outputs: o_h += (p_h[j] / sum_h) * row over j in order, vectorized over the latent width.
  const __m512 sv = _mm512_load_ps(sum);
  for (int64_t j = 0; j < n; ++j) {
    const float* row = latent + idx[j] * Wl;
    alignas(64) float w[16];
    _mm512_store_ps(w, _mm512_maskz_div_ps(hm, _mm512_loadu_ps(s.p + j * 16), sv));
    for (int64_t h = 0; h < hn; ++h) {
      const __m512 wh = _mm512_set1_ps(w[h]);
      float* oh = o + h * L;
      for (int64_t d = 0; d < L; d += 16) {
        const __mmask16 dm = tail_mask(L - d);
        const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(dm, oh + d),
                                       _mm512_mul_ps(wh, _mm512_maskz_loadu_ps(dm, row + d)));
        _mm512_mask_storeu_ps(oh + d, dm, v);
      }
    }
  }
}

void attend_query(const float* q, const float* latent, const int64_t* idx, int64_t n, int64_t H, int64_t L,
                  int64_t Dr, float scale, float* o, const mla_avx512_scratch& s) {
  for (int64_t h0 = 0; h0 < H; h0 += 16)
    attend_heads(q, h0, H - h0 < 16 ? H - h0 : 16, latent, idx, n, L, Dr, scale, o + h0 * L, s);
}

}  // namespace

void mla_attention_absorbed_avx512(const float* q_lat, const float* latent, float* o_lat, int64_t T,
                                   int64_t S, int64_t H, int64_t L, int64_t Dr, float scale,
                                   const mla_avx512_scratch& s) {
  for (int64_t i = 0; i < S; ++i) s.idx[i] = i;
  for (int64_t t = 0; t < T; ++t)
    attend_query(q_lat + t * H * (L + Dr), latent, s.idx, S - T + t + 1, H, L, Dr, scale, o_lat + t * H * L,
                 s);
}

void mla_attention_absorbed_sparse_avx512(const float* q_lat, const float* latent, const int32_t* indices,
                                          float* o_lat, int64_t T, int64_t H, int64_t L, int64_t Dr,
                                          int64_t topk, float scale, const mla_avx512_scratch& s) {
  for (int64_t t = 0; t < T; ++t) {
    int64_t n = 0;
    for (int64_t j = 0; j < topk; ++j)
      if (indices[t * topk + j] >= 0) s.idx[n++] = indices[t * topk + j];
    attend_query(q_lat + t * H * (L + Dr), latent, s.idx, n, H, L, Dr, scale, o_lat + t * H * L, s);
  }
}

void mla_absorb_q_avx512(const float* q, const float* wkv_b, float* q_lat, int64_t T, int64_t H, int64_t Dn,
                         int64_t Dr, int64_t Dv, int64_t L) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q + (t * H + h) * (Dn + Dr);
      float* out = q_lat + (t * H + h) * (L + Dr);
      for (int64_t l = 0; l < L; l += 16)
        _mm512_mask_storeu_ps(out + l, tail_mask(L - l), _mm512_setzero_ps());
      // out[l] += q_nope[i] * W_UK_h[i][l], rows i in order (each element's sum in the reference's order).
      for (int64_t i = 0; i < Dn; ++i) {
        const float* wr = wkv_b + (h * (Dn + Dv) + i) * L;
        const __m512 qi = _mm512_set1_ps(qh[i]);
        for (int64_t l = 0; l < L; l += 16) {
          const __mmask16 m = tail_mask(L - l);
          const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, out + l),
                                         _mm512_mul_ps(qi, _mm512_maskz_loadu_ps(m, wr + l)));
          _mm512_mask_storeu_ps(out + l, m, v);
        }
      }
      for (int64_t i = 0; i < Dr; ++i) out[L + i] = qh[Dn + i];
    }
}

void mla_unabsorb_o_avx512(const float* o_lat, const float* wuv_t, float* o, int64_t T, int64_t H, int64_t Dv,
                           int64_t L) {
  // Lanes are 16 outputs j, four blocks of them at a time (independent add chains); each lane sums
  // W_UV_h[j][l] * o_lat[l] over l in order, as the reference's scalar loop does.
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float* ol = o_lat + (t * H + h) * L;
      const float* wt = wuv_t + h * L * Dv;
      float* oh = o + (t * H + h) * Dv;
      for (int64_t j0 = 0; j0 < Dv; j0 += 64) {
        __mmask16 m[4];
        for (int b = 0; b < 4; ++b) m[b] = j0 + 16 * b < Dv ? tail_mask(Dv - j0 - 16 * b) : __mmask16(0);
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t l = 0; l < L; ++l) {
          const __m512 x = _mm512_set1_ps(ol[l]);
          const float* wr = wt + l * Dv + j0;
          for (int b = 0; b < 4; ++b)
            acc[b] = _mm512_add_ps(acc[b], _mm512_mul_ps(_mm512_maskz_loadu_ps(m[b], wr + 16 * b), x));
        }
        for (int b = 0; b < 4; ++b) _mm512_mask_storeu_ps(oh + j0 + 16 * b, m[b], acc[b]);
      }
    }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
