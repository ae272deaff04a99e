// tensor_view: a non-owning look at stored tensor bytes (an mmap'ed checkpoint, a buffer). It carries no
// strides: stored tensors are dense and row-major, the safetensors layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moxi/tensor/dtype.h"

namespace moxi {

struct tensor_view {
  dtype type = dtype::U8;
  std::vector<int64_t> shape;  // empty = 0-rank (one element)
  const std::byte* data = nullptr;
  size_t nbytes = 0;  // numel() * dtype_size(type); the owner checked this when it made the view

  // Product of the dimensions; 1 for a 0-rank tensor, 0 when any dimension is 0.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

}  // namespace moxi
