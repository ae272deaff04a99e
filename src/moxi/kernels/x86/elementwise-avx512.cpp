// Elementwise ops on AVX-512 F/DQ: sigmoid, SwiGLU, x * sigmoid(gate), RMSNorm, L2 norm, the sigmoid-gated
// RMSNorm, and the KDA short convolution with its SiLU and its lower-bound decay gate. Each performs the
// scalar reference's fp32 operations (ref/basic.cpp, ref/kda.cpp) lane by lane and in the same order: exp is
// exp16 (ref::exp_f32 on 16 lanes), 1 / (1 + e) one IEEE division, products and sums separate instructions
// (this file is built with -ffp-contract=off), so every output is bit-identical to the reference's
// (tests/kernels/backend-ops-test.cpp).
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt); called only after
// kernels::x86::cpu() confirmed them. Only intrinsics and internal-linkage headers are included, and
// scratch comes from the caller (x86/backend.cpp).
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

#include "moxi/kernels/x86/exp16-inl.h"

namespace moxi::kernels::ref {
float sum_of_squares(const float* x, int64_t D);  // ref/basic.h; declared here, so no shared header's inline
}  // namespace moxi::kernels::ref

namespace moxi::kernels::x86 {
namespace {

inline __mmask16 tail(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// ref::sigmoid: 1 / (1 + exp(-x)), -x a sign flip as in C++.
inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_xor_ps(x, _mm512_set1_ps(-0.0f)))));
}

}  // namespace

void sigmoid_avx512(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    _mm512_mask_storeu_ps(y + i, m, sigmoid16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void swiglu_avx512(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {  // ref: silu(g) * u = (g * sigmoid(g)) * u
    const __mmask16 m = tail(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 s = _mm512_mul_ps(g, sigmoid16(g));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void mul_sigmoid_avx512(const float* x, const float* gate, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    const __m512 s = sigmoid16(_mm512_maskz_loadu_ps(m, gate + i));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), s));
  }
}

// ref::kda_gate_lower_bound: g = lb * sigmoid(a_h * (graw + dt_bias)), with a[h] = exp(A_log[h]) computed by
// the caller (libm's exp, as the reference) or 1; z adds +0 where there is no bias, as the reference does.
void kda_gate_lower_bound_avx512(const float* graw, const float* a, const float* dt_bias, float lb, float* g,
                                 int64_t T, int64_t H, int64_t K) {
  const __m512 lbv = _mm512_set1_ps(lb);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const __m512 av = _mm512_set1_ps(a[h]);
      for (int64_t d = 0; d < K; d += 16) {
        const __mmask16 m = tail(K - d);
        const int64_t i = (t * H + h) * K + d;
        const __m512 bias = dt_bias ? _mm512_maskz_loadu_ps(m, dt_bias + h * K + d) : _mm512_setzero_ps();
        const __m512 z = _mm512_add_ps(_mm512_maskz_loadu_ps(m, graw + i), bias);
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(lbv, sigmoid16(_mm512_mul_ps(av, z))));
      }
    }
}

// ref::gated_rms_norm: the sum of squares (the reference's function), then
// y = x * inv * w * sigmoid(gate), multiplied left to right.
void gated_rms_norm_avx512(const float* x, const float* gate, const float* w, float* y, int64_t rows,
                           int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    const float* gr = gate + r * D;
    float* yr = y + r * D;
    const float ss = ref::sum_of_squares(xr, D);  // the reference's own sum, compiled for baseline x86-64
    const __m512 inv = _mm512_set1_ps(1.0f / __builtin_sqrtf(ss / float(D) + eps));
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 m = tail(D - d);
      const __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + d), inv),
                                     _mm512_maskz_loadu_ps(m, w + d));
      _mm512_mask_storeu_ps(yr + d, m, _mm512_mul_ps(v, sigmoid16(_mm512_maskz_loadu_ps(m, gr + d))));
    }
  }
}

// ref::rms_norm (w may be null) and ref::l2norm: the reference's ordered sum of squares, then the row scaled
// lane by lane, w * (x * inv) and x * inv as the reference multiplies.
void rms_norm_avx512(const float* x, const float* w, float* y, int64_t rows, int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    const float ss = ref::sum_of_squares(xr, D);
    const __m512 inv = _mm512_set1_ps(1.0f / __builtin_sqrtf(ss / float(D) + eps));
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 m = tail(D - d);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + d), inv);
      _mm512_mask_storeu_ps(yr + d, m, w ? _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + d), v) : v);
    }
  }
}

void l2norm_avx512(const float* x, float* y, int64_t rows, int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    const __m512 inv = _mm512_set1_ps(1.0f / __builtin_sqrtf(ref::sum_of_squares(xr, D) + eps));
    for (int64_t d = 0; d < D; d += 16) {
      const __mmask16 m = tail(D - d);
      _mm512_mask_storeu_ps(yr + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, xr + d), inv));
    }
  }
}

// ref::causal_conv1d_silu over 16 channels at a time: per output, acc = 0, then acc += w[c][j] * x[t - P + j]
// for j = 0..W-1 in order (rows before the chunk from the state, or zero without one), then silu(acc).
// wt: the tap-major weights, wt[j * C + c] (ref::causal_conv1d_silu).
void causal_conv1d_silu_avx512(const float* x, const float* wt, float* state, float* y, int64_t T, int64_t C,
                               int64_t W) {
  const int64_t P = W - 1;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = tail(C - c);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t j = 0; j < W; ++j) {
        const int64_t src = t - P + j;
        const __m512 xv = src >= 0 ? _mm512_maskz_loadu_ps(m, x + src * C + c)
                          : state  ? _mm512_maskz_loadu_ps(m, state + (P + src) * C + c)
                                   : _mm512_setzero_ps();
        acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, wt + j * C + c), xv));
      }
      _mm512_mask_storeu_ps(y + t * C + c, m, _mm512_mul_ps(acc, sigmoid16(acc)));
    }
  if (!state) return;
  // New state = the last P rows of [state ; x], row by row in increasing order as the reference does.
  for (int64_t i = 0; i < P; ++i) {
    const int64_t src = T + i;
    const float* from = src < P ? state + src * C : x + (src - P) * C;
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = tail(C - c);
      _mm512_mask_storeu_ps(state + i * C + c, m, _mm512_maskz_loadu_ps(m, from + c));
    }
  }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
