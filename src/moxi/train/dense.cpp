// y = x W^T (see dense.h).
#include "moxi/train/dense.h"

namespace moxi::train {

torch::Tensor linear_nt(const torch::Tensor& x, const torch::Tensor& w) {
  return torch::matmul(x, w.t());
}

}  // namespace moxi::train
