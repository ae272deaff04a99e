// The trainer's dense products y = x W^T (every Linear, the expert GEMMs, the heads). libtorch hands
// torch::matmul to libblas.so.3, which Debian's alternatives resolve to OpenBLAS once scripts/setup.sh has
// installed it, or else to the reference BLAS (netlib, ~2 GFLOP/s here). On OpenBLAS the products are plain
// torch::matmul; on netlib they run as one autograd op on oneDNN's fp32 GEMM (libtorch ships it), an order of
// magnitude faster there and slower than OpenBLAS once each call converts to and from oneDNN's layout
// (docs/train.md "Speed"). Plain fp32 products either way: only the summation order differs.
#pragma once

#include <torch/torch.h>

namespace moxi::train {

// x f32 [..., in], w f32 [out, in] -> f32 [..., out]; differentiable in both (dx = dy W, dW = dy^T x, also
// on oneDNN). torch::matmul where the BLAS is OpenBLAS or libtorch was built without oneDNN.
torch::Tensor linear_nt(const torch::Tensor& x, const torch::Tensor& w);

}  // namespace moxi::train
