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

// RMSNorm in fp32 (HF LlamaRMSNorm / KimiRMSNorm): y = w * x * rsqrt(mean(x^2) + eps). w may be nullptr
// (no affine weight). Rows are normalized independently.
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
