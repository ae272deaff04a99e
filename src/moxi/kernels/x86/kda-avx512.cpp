// KDA recurrent decode on AVX-512 F: the same arithmetic as ref::kda_recurrent, element for element and in
// the same order (decay, k^T S, delta, rank-1 update, o = S^T (scale q)), vectorized over V and fused into
// two passes over each head's [K, V] state instead of four. Products and sums are separate instructions
// (this file is built with -ffp-contract=off) and exp is exp16, the 16-lane form of ref::exp_f32 (the same
// fp32 operations, its fmas explicit in both), so the result is bit-identical to the reference
// (tests/kernels/backend-ops-test.cpp; exp16 alone: tests/kernels/exp-test.cpp).
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt); called only after
// kernels::x86::cpu() confirmed them. Only intrinsics and C headers are included, and scratch comes from
// the caller: no template of a shared header (std::vector) gets an AVX-512 body the linker could pick for
// code that runs on other CPUs. ref/exp.h is included for its constants only; its inline exp_f32 is never
// called here, so no AVX-512 body of it is emitted.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "moxi/kernels/ref/exp.h"
#include "moxi/kernels/x86/exp16-inl.h"
#include "moxi/kernels/x86/kda-x86.h"

namespace moxi::kernels::x86 {
namespace {

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// float(x[i]) for 16 fp64 values (masked lanes read 0).
inline __m512 load_pd16_ps(const double* x, __mmask16 m) {
  const __m256 lo = _mm512_cvtpd_ps(_mm512_maskz_loadu_pd(__mmask8(m), x));
  const __m256 hi = _mm512_cvtpd_ps(_mm512_maskz_loadu_pd(__mmask8(m >> 8), x + 8));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// float(x[i] - y[i]) for 16 fp64 values (masked lanes give 0).
inline __m512 diff_pd16_ps(const double* x, const double* y, __mmask16 m) {
  const __m256 lo = _mm512_cvtpd_ps(
      _mm512_sub_pd(_mm512_maskz_loadu_pd(__mmask8(m), x), _mm512_maskz_loadu_pd(__mmask8(m), y)));
  const __m256 hi = _mm512_cvtpd_ps(_mm512_sub_pd(_mm512_maskz_loadu_pd(__mmask8(m >> 8), x + 8),
                                                  _mm512_maskz_loadu_pd(__mmask8(m >> 8), y + 8)));
  return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}

// One head, one token. S f32 [K, V], delta scratch f32 [V].
void recurrent_head(const float* qt, const float* kt, const float* vt, const float* gt, float bt, float scale,
                    float* S, float* ot, float* delta, int64_t K, int64_t V) {
  for (int64_t j = 0; j < V; j += 16) _mm512_mask_storeu_ps(delta + j, tail_mask(V - j), _mm512_setzero_ps());
  // Pass 1: decay each state row, then accumulate k^T S over rows in order (ref: two loops, same order).
  // The decays exp(g) are computed 16 rows at a time.
  alignas(64) float ev[16];
  for (int64_t d = 0; d < K; ++d) {
    if (d % 16 == 0) _mm512_store_ps(ev, exp16(_mm512_maskz_loadu_ps(tail_mask(K - d), gt + d)));
    const __m512 e = _mm512_set1_ps(ev[d % 16]);
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

// ---- Chunked prefill: ref::kda_chunked's arithmetic with its j (value) and d (key) loops vectorized and the
// (r, c) score loop vectorized across 16 columns c (each lane sums over d in the reference's order). Every
// exp is exp16, over the 16 columns c in the score loop and over 16 keys d elsewhere.

namespace {

// Loads 16 fp64 values of G^T row d (columns c0..c0+15, masked) and returns float(G_r[d] - G_c[d]).
inline __m512 gate_diff16(double grd, const double* gt_row, __mmask16 m) {
  const __m512d a = _mm512_sub_pd(_mm512_set1_pd(grd), _mm512_maskz_loadu_pd(__mmask8(m), gt_row));
  const __m512d b = _mm512_sub_pd(_mm512_set1_pd(grd), _mm512_maskz_loadu_pd(__mmask8(m >> 8), gt_row + 8));
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(a)), _mm512_cvtpd_ps(b), 1);
}

// y[0, n) op= a * x[0, n) for op -= (sub) or += (add), one product and one sum per element.
template <bool Sub>
inline void axpy(float* y, float a, const float* x, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    const __m512 p = _mm512_mul_ps(av, _mm512_maskz_loadu_ps(m, x + j));
    const __m512 yv = _mm512_maskz_loadu_ps(m, y + j);
    _mm512_mask_storeu_ps(y + j, m, Sub ? _mm512_sub_ps(yv, p) : _mm512_add_ps(yv, p));
  }
}

}  // namespace

void kda_chunked_avx512(const float* q, const float* k, const float* v, const float* g, const float* beta,
                        float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V,
                        const kda_chunk_scratch& w) {
  const int64_t C = kKdaChunk;
  for (int64_t h = 0; h < H; ++h) {
    float* S = state + h * K * V;
    for (int64_t c0 = 0; c0 < T; c0 += C) {
      const int64_t n = T - c0 < C ? T - c0 : C;
      auto Q = [&](int64_t r) { return q + ((c0 + r) * H + h) * K; };
      auto Kr = [&](int64_t r) { return k + ((c0 + r) * H + h) * K; };
      auto Vr = [&](int64_t r) { return v + ((c0 + r) * H + h) * V; };
      auto B = [&](int64_t r) { return beta[(c0 + r) * H + h]; };

      // G (fp64 inclusive cumsum) and its transpose, K transposed: [d][c] rows for the column lanes.
      for (int64_t r = 0; r < n; ++r) {
        const float* gr = g + ((c0 + r) * H + h) * K;
        for (int64_t d = 0; d < K; ++d) {
          const double x = (r ? w.G[(r - 1) * K + d] : 0.0) + gr[d];
          w.G[r * K + d] = x;
          w.GT[d * C + r] = x;
          w.KT[d * C + r] = Kr(r)[d];
        }
      }

      // Aqk and L: lanes are 16 columns c <= r; each sums over d in order as the reference's scalar loop.
      // A 16-column block is one sub-chunk (SC == 16): before r's own, the factored form (the reference's
      // KF, QE, KE), else the exp of each difference.
      constexpr int64_t SC = kKdaSubChunk;
      static_assert(SC == 16, "a column block of 16 lanes is one sub-chunk");
      for (int64_t cb = 0; cb < (n - 1) / SC * SC; cb += SC) {
        const int64_t e = cb + SC - 1;
        for (int64_t d = 0; d < K; ++d)
          _mm512_storeu_ps(w.KFT + d * C + cb,
                           _mm512_mul_ps(exp16(gate_diff16(w.G[e * K + d], w.GT + d * C + cb, 0xFFFF)),
                                         _mm512_loadu_ps(w.KT + d * C + cb)));
      }
      for (int64_t r = 0; r < n; ++r) {
        const float* qr = Q(r);
        const float* kr = Kr(r);
        const int64_t r0 = r / SC * SC;
        for (int64_t j = 0; j < r0 / SC; ++j) {
          const int64_t e = j * SC + SC - 1;
          for (int64_t d = 0; d < K; d += 16) {
            const __mmask16 m = tail_mask(K - d);
            const __m512 x = exp16(diff_pd16_ps(w.G + r * K + d, w.G + e * K + d, m));
            _mm512_mask_storeu_ps(w.QE + j * K + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, qr + d), x));
            _mm512_mask_storeu_ps(w.KE + j * K + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, kr + d), x));
          }
        }
        for (int64_t cb = 0; cb <= r; cb += 16) {
          const __mmask16 m = tail_mask(r + 1 - cb);
          __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
          if (cb < r0) {
            const float* qe = w.QE + cb / SC * K;
            const float* ke = w.KE + cb / SC * K;
            for (int64_t d = 0; d < K; ++d) {
              const __m512 kf = _mm512_loadu_ps(w.KFT + d * C + cb);
              a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_set1_ps(ke[d]), kf));
              b = _mm512_add_ps(b, _mm512_mul_ps(_mm512_set1_ps(qe[d]), kf));
            }
          } else {
            for (int64_t d = 0; d < K; ++d) {
              const __m512 e = exp16(gate_diff16(w.G[r * K + d], w.GT + d * C + cb, m));
              const __m512 ek = _mm512_mul_ps(e, _mm512_maskz_loadu_ps(m, w.KT + d * C + cb));
              a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_set1_ps(kr[d]), ek));
              b = _mm512_add_ps(b, _mm512_mul_ps(_mm512_set1_ps(qr[d]), ek));
            }
          }
          alignas(64) float av[16], bv[16];
          _mm512_store_ps(av, a);
          _mm512_store_ps(bv, b);
          for (int64_t i = 0; i < 16 && cb + i <= r; ++i) {
            const int64_t c = cb + i;
            w.Aqk[r * C + c] = scale * bv[i];
            w.L[r * C + c] = c < r ? B(r) * av[i] : 0.0f;
          }
        }
      }

      // UT transform by forward substitution.
      for (int64_t r = 0; r < n; ++r) {
        const float br = B(r);
        const float* kr = Kr(r);
        const float* vr = Vr(r);
        float* wr = w.Wm + r * K;
        float* ur = w.U + r * V;
        for (int64_t d = 0; d < K; d += 16) {  // (br * e) * k as the reference
          const __mmask16 m = tail_mask(K - d);
          const __m512 e = exp16(load_pd16_ps(w.G + r * K + d, m));
          _mm512_mask_storeu_ps(
              wr + d, m,
              _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(br), e), _mm512_maskz_loadu_ps(m, kr + d)));
        }
        for (int64_t j = 0; j < V; ++j) ur[j] = br * vr[j];
        for (int64_t c = 0; c < r; ++c) {
          const float l = w.L[r * C + c];
          axpy<true>(wr, l, w.Wm + c * K, K);
          axpy<true>(ur, l, w.U + c * V, V);
        }
      }

      // Pseudo-values U - W S.
      for (int64_t r = 0; r < n; ++r)
        for (int64_t d = 0; d < K; ++d) axpy<true>(w.U + r * V, w.Wm[r * K + d], S + d * V, V);

      // O = (scale Q exp(G)) S + Aqk V~.
      for (int64_t r = 0; r < n; ++r) {
        const float* qr = Q(r);
        float* orow = o + ((c0 + r) * H + h) * V;
        for (int64_t j = 0; j < V; j += 16)
          _mm512_mask_storeu_ps(orow + j, tail_mask(V - j), _mm512_setzero_ps());
        alignas(64) float ev[16];
        for (int64_t d = 0; d < K; ++d) {
          if (d % 16 == 0) _mm512_store_ps(ev, exp16(load_pd16_ps(w.G + r * K + d, tail_mask(K - d))));
          const float qd = scale * qr[d] * ev[d % 16];
          axpy<false>(orow, qd, S + d * V, V);
        }
        for (int64_t c = 0; c <= r; ++c) axpy<false>(orow, w.Aqk[r * C + c], w.U + c * V, V);
      }

      // S' = diag(exp(G_last)) S + sum_c (exp(G_last - G_c) k_c) V~_c^T.
      const double* Glast = w.G + (n - 1) * K;
      for (int64_t c = 0; c < n; ++c) {
        const float* kc = Kr(c);
        for (int64_t d = 0; d < K; d += 16) {
          const __mmask16 m = tail_mask(K - d);
          const __m512 e = exp16(diff_pd16_ps(Glast + d, w.G + c * K + d, m));
          _mm512_mask_storeu_ps(w.decay + c * K + d, m, _mm512_mul_ps(e, _mm512_maskz_loadu_ps(m, kc + d)));
        }
      }
      alignas(64) float ev[16];
      for (int64_t d = 0; d < K; ++d) {
        if (d % 16 == 0) _mm512_store_ps(ev, exp16(load_pd16_ps(Glast + d, tail_mask(K - d))));
        const __m512 e = _mm512_set1_ps(ev[d % 16]);
        float* Sd = S + d * V;
        for (int64_t j = 0; j < V; j += 16) {
          const __mmask16 m = tail_mask(V - j);
          _mm512_mask_storeu_ps(Sd + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, Sd + j), e));
        }
        for (int64_t c = 0; c < n; ++c) axpy<false>(Sd, w.decay[c * K + d], w.U + c * V, V);
      }
    }
  }
}

void exp_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
