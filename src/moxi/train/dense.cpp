// y = x W^T on OpenBLAS, or on oneDNN with a matching backward (see dense.h).
#include "moxi/train/dense.h"

#include <ATen/Context.h>
#include <dlfcn.h>

namespace moxi::train {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// a [M, K], b [N, K] -> a b^T [M, N] through oneDNN's inner-product primitive.
torch::Tensor gemm_nt(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.size(0) == 0 || b.size(0) == 0) return torch::zeros({a.size(0), b.size(0)}, torch::kFloat32);
  return torch::mkldnn_linear(a.contiguous().to_mkldnn(), b.contiguous().to_mkldnn(), {}).to_dense();
}

struct onednn_linear : torch::autograd::Function<onednn_linear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x2, const torch::Tensor& w) {
    ctx->save_for_backward({x2, w});
    return gemm_nt(x2, w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x2 = saved[0];
    const auto& w = saved[1];
    const auto gy = grads[0].contiguous();  // [M, out]
    return {gemm_nt(gy, w.t()), gemm_nt(gy.t(), x2.t())};
  }
};

// Whether libtorch's BLAS (libblas.so.3, chosen by Debian's alternatives) is OpenBLAS: its own entry points
// are then loaded in the process.
bool blas_is_openblas() {
  static const bool yes = dlsym(RTLD_DEFAULT, "openblas_get_config") != nullptr;
  return yes;
}

}  // namespace

torch::Tensor linear_nt(const torch::Tensor& x, const torch::Tensor& w) {
  if (blas_is_openblas() || !at::hasMKLDNN()) return torch::matmul(x, w.t());
  auto shape = x.sizes().vec();
  shape.back() = w.size(0);
  return onednn_linear::apply(x.reshape({-1, x.size(-1)}), w).view(shape);
}

}  // namespace moxi::train
