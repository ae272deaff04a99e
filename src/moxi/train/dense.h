// The trainer's dense products y = x W^T (every Linear, the expert GEMMs, the heads), in one place. libtorch
// hands torch::matmul to libblas.so.3, which Debian's alternatives resolve to OpenBLAS once scripts/setup.sh
// has installed it (the reference BLAS it replaces ran ~2 GFLOP/s here; oneDNN, which libtorch also ships,
// was faster than that but slower than OpenBLAS once each call converted to and from its layout:
// docs/train.md "Speed").
#pragma once

#include <torch/torch.h>

namespace moxi::train {

// x f32 [..., in], w f32 [out, in] -> f32 [..., out]; differentiable in both (dx = dy W, dW = dy^T x).
torch::Tensor linear_nt(const torch::Tensor& x, const torch::Tensor& w);

}  // namespace moxi::train
