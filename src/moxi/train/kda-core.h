// The KDA delta-rule core in libtorch with autograd, in two forms with one meaning (docs/kimi-linear.md):
// token by token (the recurrence itself, the trainer's reference) and chunkwise (the WY / UT-transform form
// of FLA's chunk_kda and the engine's kernels::ref::kda_chunked), which runs a handful of batched matrix ops
// per chunk instead of several tiny ops per token and is what training uses.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace moxi::train {

// q, k f32 [B, T, H, K] (L2-normalized, unscaled), v f32 [B, T, H, V], g f32 [B, T, H, K] log decay (<= 0),
// beta f32 [B, T, H]; the state starts at zero. Per token: S = diag(exp(g_t)) S; S += k_t (beta_t (v_t -
// S^T k_t))^T; o_t = S^T (scale q_t). Returns o f32 [B, T, H, V].
torch::Tensor kda_recurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            const torch::Tensor& g, const torch::Tensor& beta, double scale);

// The same function by chunks of `chunk` tokens (T need not be a multiple). Inside a chunk with inclusive
// gate cumsum G: A_qk[r,c] = scale q_r . (exp(G_r - G_c) k_c) (c <= r), L[r,c] = beta_r k_r . (exp(G_r -
// G_c) k_c) (c < r); W = (I + L)^-1 diag(beta) (exp(G) k), U = (I + L)^-1 diag(beta) v; then per chunk
// V~ = U - W S, O = (scale q exp(G)) S + A_qk V~, S' = exp(G_last) S + (exp(G_last - G) k)^T V~.
torch::Tensor kda_chunked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& g, const torch::Tensor& beta, double scale,
                          int64_t chunk = 16);

}  // namespace moxi::train
