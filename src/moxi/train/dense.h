// The trainer's dense products y = x W^T (every Linear, the expert GEMMs, the heads) as one autograd op on
// oneDNN's fp32 GEMM. Debian's libtorch sends torch::matmul to the reference BLAS (netlib), ~2 GFLOP/s here;
// libtorch's oneDNN, which it also ships, is an order of magnitude faster on the same products (measured in
// docs/train.md). Plain fp32 products either way: only the summation order differs.
#pragma once

#include <torch/torch.h>

namespace moxi::train {

// x f32 [..., in], w f32 [out, in] -> f32 [..., out]; differentiable in both (dx = dy W, dW = dy^T x, also
// on oneDNN). Falls back to torch::matmul where libtorch was built without oneDNN.
torch::Tensor linear_nt(const torch::Tensor& x, const torch::Tensor& w);

}  // namespace moxi::train
