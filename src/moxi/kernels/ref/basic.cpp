// Scalar reference kernels: matmul, norms, activations (see basic.h for shapes and semantics).
#include "moxi/kernels/ref/basic.h"

#include <cmath>
#include <limits>

#include "moxi/base/half.h"
#include "moxi/kernels/ref/exp.h"

namespace moxi::kernels::ref {

namespace {

// y[t, n] = sum_k x[t, k] * w[n, k], each output summed in input order k = 0..K-1 with one fp32
// accumulator. Eight outputs are computed side by side only to break the single dependency chain of a
// scalar dot product (about 4x faster); every output keeps exactly the simple loop's summation order,
// so results do not depend on the blocking (and T = 1 decode gets the same speedup).
// weight(n, k) gives W[n][k] as f32.
template <typename Weight>
void matmul_impl(const float* x, const float* bias, float* y, int64_t T, int64_t N, int64_t K,
                 Weight weight) {
  constexpr int64_t kBlock = 8;
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * K;
    float* yr = y + t * N;
    int64_t n = 0;
    for (; n + kBlock <= N; n += kBlock) {
      float acc[kBlock] = {};
      for (int64_t k = 0; k < K; ++k) {
#pragma GCC unroll 8
        for (int64_t j = 0; j < kBlock; ++j) acc[j] += xr[k] * weight(n + j, k);
      }
      for (int64_t j = 0; j < kBlock; ++j) yr[n + j] = bias ? acc[j] + bias[n + j] : acc[j];
    }
    for (; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += xr[k] * weight(n, k);
      yr[n] = bias ? acc + bias[n] : acc;
    }
  }
}

}  // namespace

void matmul(const float* x, const float* w, const float* bias, float* y, int64_t T, int64_t N, int64_t K) {
  matmul_impl(x, bias, y, T, N, K, [w, K](int64_t n, int64_t k) { return w[n * K + k]; });
}

void matmul_bf16(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                 int64_t K) {
  matmul_impl(x, bias, y, T, N, K, [w, K](int64_t n, int64_t k) { return bf16_to_f32(w[n * K + k]); });
}

void pack_bf16_panels(const uint16_t* w, int64_t N, int64_t K, uint16_t* out) {
  const int64_t P = (N + kBf16PanelRows - 1) / kBf16PanelRows, K2 = bf16_panel_k2(K);
  for (int64_t p = 0; p < P; ++p)
    for (int64_t k = 0; k < K2; ++k)
      for (int64_t r = 0; r < kBf16PanelRows; ++r) {
        const int64_t n = p * kBf16PanelRows + r;
        out[bf16_panel_index(n, k, K)] = n < N && k < K ? w[n * K + k] : uint16_t(0);
      }
}

void matmul_bf16_panels(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T, int64_t N,
                        int64_t K) {
  matmul_impl(x, bias, y, T, N, K,
              [w, K](int64_t n, int64_t k) { return bf16_to_f32(w[bf16_panel_index(n, k, K)]); });
}

float sum_of_squares(const float* x, int64_t D) {
  float ss = 0.0f;
  for (int64_t d = 0; d < D; ++d) ss += x[d] * x[d];
  return ss;
}

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    const float ss = sum_of_squares(xr, D);
    const float inv = 1.0f / std::sqrt(ss / float(D) + eps);
    for (int64_t d = 0; d < D; ++d) yr[d] = w ? w[d] * (xr[d] * inv) : xr[d] * inv;
  }
}

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows, int64_t D,
                float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    // Two passes (mean, then centred variance) rather than E[x^2]-E[x]^2, which cancels badly.
    float mean = 0.0f;
    for (int64_t d = 0; d < D; ++d) mean += xr[d];
    mean /= float(D);
    float var = 0.0f;
    for (int64_t d = 0; d < D; ++d) var += (xr[d] - mean) * (xr[d] - mean);
    var /= float(D);
    const float inv = 1.0f / std::sqrt(var + eps);
    for (int64_t d = 0; d < D; ++d) {
      float v = (xr[d] - mean) * inv;
      if (w) v *= w[d];
      if (b) v += b[d];
      yr[d] = v;
    }
  }
}

void l2norm(const float* x, float* y, int64_t rows, int64_t D, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    const float ss = sum_of_squares(xr, D);
    const float inv = 1.0f / std::sqrt(ss + eps);
    for (int64_t d = 0; d < D; ++d) yr[d] = xr[d] * inv;
  }
}

void softmax(const float* x, float* y, int64_t rows, int64_t D) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t d = 0; d < D; ++d) mx = std::fmax(mx, xr[d]);
    if (mx == -std::numeric_limits<float>::infinity()) {
      for (int64_t d = 0; d < D; ++d) yr[d] = 0.0f;
      continue;
    }
    float sum = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      yr[d] = std::exp(xr[d] - mx);
      sum += yr[d];
    }
    const float inv = 1.0f / sum;
    for (int64_t d = 0; d < D; ++d) yr[d] *= inv;
  }
}

// exp is moxi's own (ref/exp.h), so the AVX-512 twins of the ops built on sigmoid are bit-identical to these.
float sigmoid(float x) {
  return 1.0f / (1.0f + exp_f32(-x));
}
float silu(float x) {
  return x * sigmoid(x);
}
float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

void sigmoid(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid(x[i]);
}
void silu(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu(x[i]);
}
void softplus(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = softplus(x[i]);
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = silu(gate[i]) * up[i];
}

void mul_sigmoid(const float* x, const float* gate, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid(gate[i]);
}

}  // namespace moxi::kernels::ref
