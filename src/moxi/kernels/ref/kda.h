// Scalar reference kernels for Kimi Delta Attention (docs/model-spec.md §3.1, docs/kimi-linear.md §1-2):
// short convolution with its decode state, both decay-gate forms, the token recurrence (decode), the
// chunkwise WY/UT prefill, and the sigmoid-gated per-head RMSNorm.
//
// Layouts (fixed here so prefill and decode can never disagree, cf. vLLM #41292):
//   activations are token-major: q, k, g [T, H, K]; v, o [T, H, V]; beta [T, H];
//   the recurrent state is K-major fp32: S [H, K, V], S[h][k][v] (FLA's default, state_v_first=False);
//   the conv state holds the W-1 previous inputs, oldest first: [W-1, C] (vLLM's "SD" layout).
// Scaling: the recurrence kernels take q and k already L2-normalized (ref::l2norm, eps 1e-6) and apply
// `scale` (K^-0.5 for KDA) to q themselves, as FLA's chunk_kda / fused_recurrent_kda do.
// Gates: g is the log decay, g <= 0 (both gate forms guarantee it). The chunk kernel relies on it.
#pragma once

#include <cstdint>

namespace moxi::kernels::ref {

// Depthwise causal conv1d + SiLU (fla ShortConvolution, activation 'silu', no bias):
//   y[t,c] = SiLU(sum_{j<W} w[j,c] * x[t-W+1+j, c]), the newest token times w[W-1, c];
// inputs before t=0 come from `state` (the previous W-1 inputs, oldest first). On return `state` holds
// the last W-1 inputs of the extended sequence, so calls can be chained (prefill, then decode steps).
// state == nullptr means a fresh sequence (zeros) and no state is returned. y must not alias x.
void causal_conv1d_silu(const float* x,  // f32 [T, C]
                        const float* w,  // f32 [W, C]: tap-major, the checkpoint's [C, 1, W] transposed
                                         // (at load, model/layers/kda.cpp), so a tap's weights are a row
                        float* state,    // f32 [W-1, C], in/out, or nullptr
                        float* y,        // f32 [T, C]
                        int64_t T, int64_t C, int64_t W);

// Softplus gate (Kimi-Linear; FLA kda_gate_ref): g[t,h,d] = -exp(A_log[h]) * softplus(graw + dt_bias[h*K+d]).
// dt_bias may be nullptr. g may alias graw.
void kda_gate_softplus(const float* graw,     // f32 [T, H, K]
                       const float* A_log,    // f32 [H]
                       const float* dt_bias,  // f32 [H*K], or nullptr
                       float* g,              // f32 [T, H, K]
                       int64_t T, int64_t H, int64_t K);

// Lower-bound ("safe") gate (K3; FLA naive_kda_lowerbound_gate):
//   g = lower_bound * sigmoid(exp(A_log[h]) * (graw + dt_bias[h*K+d])), in [lower_bound, 0).
// A_log == nullptr means no A (factor 1), dt_bias == nullptr means no bias. g may alias graw.
void kda_gate_lower_bound(const float* graw,     // f32 [T, H, K]
                          const float* A_log,    // f32 [H], or nullptr
                          const float* dt_bias,  // f32 [H*K], or nullptr
                          float lower_bound,     // e.g. -5
                          float* g,              // f32 [T, H, K]
                          int64_t T, int64_t H, int64_t K);

// Token-by-token KDA recurrence (FLA naive_recurrent_kda / fused_recurrent_kda), one step per token:
//   S <- diag(exp(g_t)) S;  S <- S + beta_t k_t (v_t - k_t^T S)^T;  o_t = S^T (scale * q_t).
// `state` is the initial state on entry and the final state on return. o must not alias inputs.
void kda_recurrent(const float* q,     // f32 [T, H, K], L2-normalized, unscaled
                   const float* k,     // f32 [T, H, K], L2-normalized
                   const float* v,     // f32 [T, H, V]
                   const float* g,     // f32 [T, H, K], log decay <= 0
                   const float* beta,  // f32 [T, H]
                   float scale,        // applied to q, K^-0.5 for KDA
                   float* state,       // f32 [H, K, V], in/out
                   float* o,           // f32 [T, H, V]
                   int64_t T, int64_t H, int64_t K, int64_t V);

// Chunk length of the chunkwise kernel (FLA's BT).
inline constexpr int64_t kda_chunk_size = 64;
// Inside a chunk, pairs of tokens in different sub-chunks of this many take the factored decay (kda.cpp).
inline constexpr int64_t kda_sub_chunk = 16;

// Chunkwise-parallel KDA (FLA naive_chunk_kda, the WY/UT-transform form, docs/kimi-linear.md §2.1), chunks of
// kda_chunk_size tokens with a shorter last chunk (any T >= 0). Same semantics, inputs and state as
// kda_recurrent; equal to it up to fp32 rounding.
void kda_chunked(const float* q,     // f32 [T, H, K], L2-normalized, unscaled
                 const float* k,     // f32 [T, H, K], L2-normalized
                 const float* v,     // f32 [T, H, V]
                 const float* g,     // f32 [T, H, K], log decay <= 0
                 const float* beta,  // f32 [T, H]
                 float scale,        // applied to q, K^-0.5 for KDA
                 float* state,       // f32 [H, K, V], in/out
                 float* o,           // f32 [T, H, V]
                 int64_t T, int64_t H, int64_t K, int64_t V);

// Sigmoid-gated RMSNorm over the last dim (FLA FusedRMSNormGated, activation 'sigmoid'; one weight shared
// by all heads): y = x * rsqrt(mean(x^2) + eps) * w * sigmoid(gate). y may alias x.
void gated_rms_norm(const float* x,     // f32 [rows, D]  (rows = T*H)
                    const float* gate,  // f32 [rows, D]
                    const float* w,     // f32 [D]
                    float* y,           // f32 [rows, D]
                    int64_t rows, int64_t D, float eps);

}  // namespace moxi::kernels::ref
