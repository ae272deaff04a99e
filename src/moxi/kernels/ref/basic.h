// Scalar reference kernels for the elementwise, normalization and dense-matmul ops every layer uses.
// Contract (docs/design.md §2): pure functions on raw row-major pointers with explicit shapes, fp32
// compute, no allocation. Unless a function says otherwise, output may alias input (in-place is fine).
#pragma once

#include <cstdint>

namespace moxi::kernels::ref {

// y = x · W^T (+ bias). Weights are stored [out, in] exactly as HF nn.Linear stores them, so a checkpoint
// tensor is used without a transpose. fp32 accumulation in input order. y must not alias x or w.
void matmul(const float* x,     // f32 [T, K]
            const float* w,     // f32 [N, K]
            const float* bias,  // f32 [N], or nullptr
            float* y,           // f32 [T, N]
            int64_t T, int64_t N, int64_t K);

// Same with BF16 weights (raw bits, as stored in safetensors), widened to fp32 on the fly.
void matmul_bf16(const float* x,     // f32 [T, K]
                 const uint16_t* w,  // bf16 [N, K]
                 const float* bias,  // f32 [N], or nullptr
                 float* y,           // f32 [T, N]
                 int64_t T, int64_t N, int64_t K);

// BF16 weights in 16-row panels of K-pairs (the layout the x86 backends keep dense layers in): W [N, K] as
// ceil(N / 16) panels, each K2 / 2 K-pairs (K2 = K rounded up to even) of 16 rows x 2 elements: element
// (n, k) at bf16_panel_index(n, k, K), the rows past N and the column past an odd K zero. One K-pair of a
// panel is 64 contiguous bytes: a GEMM reads both k's 16 weights in one load, and 16 consecutive K-pairs
// are one AMX-BF16 B tile as stored (docs/kernels.md "Dense layers").
constexpr int64_t kBf16PanelRows = 16;
inline int64_t bf16_panel_k2(int64_t K) {
  return K + (K & 1);
}
inline int64_t bf16_panel_index(int64_t n, int64_t k, int64_t K) {
  return ((n / kBf16PanelRows) * bf16_panel_k2(K) + (k & ~int64_t(1))) * kBf16PanelRows +
         (n % kBf16PanelRows) * 2 + (k & 1);
}
// Elements of a panel-layout W [N, K] (N rounded up to whole panels, K to even).
inline int64_t bf16_panels_size(int64_t N, int64_t K) {
  return (N + kBf16PanelRows - 1) / kBf16PanelRows * kBf16PanelRows * bf16_panel_k2(K);
}

// Copies W bf16 [N, K] (rows) into the panel layout, out bf16_panels_size(N, K) elements.
void pack_bf16_panels(const uint16_t* w, int64_t N, int64_t K, uint16_t* out);

// matmul_bf16 on W in the panel layout: the same function, summed in the same order.
void matmul_bf16_panels(const float* x,     // f32 [T, K]
                        const uint16_t* w,  // bf16, bf16_panels_size(N, K)
                        const float* bias,  // f32 [N], or nullptr
                        float* y,           // f32 [T, N]
                        int64_t T, int64_t N, int64_t K);

// RMSNorm in fp32 (HF LlamaRMSNorm / KimiRMSNorm): y = w * x * rsqrt(mean(x^2) + eps). w may be nullptr
// (no affine weight). Rows are normalized independently.
// Σ x[d]² for d = 0..D-1, summed in order in fp32: the norms' statistic (their AVX-512 twins call it too, so
// their sums are the same bits).
float sum_of_squares(const float* x, int64_t D);

void rms_norm(const float* x,  // f32 [rows, D]
              const float* w,  // f32 [D], or nullptr
              float* y,        // f32 [rows, D]
              int64_t rows, int64_t D, float eps);

// LayerNorm with bias (torch.nn.LayerNorm, biased variance): y = (x - mean) * rsqrt(var + eps) * w + b.
// w and b may be nullptr (no affine part).
void layer_norm(const float* x,  // f32 [rows, D]
                const float* w,  // f32 [D], or nullptr
                const float* b,  // f32 [D], or nullptr
                float* y,        // f32 [rows, D]
                int64_t rows, int64_t D, float eps);

// L2 normalization as FLA's l2norm_fwd does it (not F.normalize): y = x / sqrt(sum x^2 + eps),
// eps = 1e-6 in KDA.
void l2norm(const float* x,  // f32 [rows, D]
            float* y,        // f32 [rows, D]
            int64_t rows, int64_t D, float eps = 1e-6f);

// Row-wise softmax, max-subtracted. A row of all -inf yields zeros (no NaN), so fully-masked rows are safe.
void softmax(const float* x,  // f32 [rows, D]
             float* y,        // f32 [rows, D]
             int64_t rows, int64_t D);

// Elementwise activations over n values.
float sigmoid(float x);
float silu(float x);
// torch.nn.functional.softplus(beta=1, threshold=20): x itself above 20, log1p(exp(x)) otherwise.
float softplus(float x);
void sigmoid(const float* x, float* y, int64_t n);   // f32 [n] -> f32 [n]
void silu(const float* x, float* y, int64_t n);      // f32 [n] -> f32 [n]
void softplus(const float* x, float* y, int64_t n);  // f32 [n] -> f32 [n]

// SwiGLU gating of an MLP: y = SiLU(gate) * up (the middle of w2(SiLU(w1 x) * w3 x)).
void swiglu(const float* gate,  // f32 [n]
            const float* up,    // f32 [n]
            float* y,           // f32 [n]
            int64_t n);

// Sigmoid output gate (Gated DSA/MLA, Qwen gated attention G1): y = x * sigmoid(gate), elementwise.
void mul_sigmoid(const float* x,     // f32 [n]
                 const float* gate,  // f32 [n]
                 float* y,           // f32 [n]
                 int64_t n);

}  // namespace moxi::kernels::ref
