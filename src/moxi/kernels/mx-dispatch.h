// MX activation fake quantization on the best variant this CPU has: for the FP8 element formats an AVX-512
// twin of mx::fake_quantize that is bit-identical to it (block scales from mx::block_scale, the elements'
// RNE rounding in vector form; kernels/x86/mx-avx512.cpp), else mx::fake_quantize itself. The MXFP4 GEMV
// and GEMM quantize their inputs with it.
#pragma once

#include <cstddef>

#include "moxi/base/mx.h"

namespace moxi::kernels {

// As mx::fake_quantize(f, x, n, out): n % 32 == 0, out may alias x.
void fake_quantize(mx::elem_format f, const float* x, size_t n, float* out);

}  // namespace moxi::kernels
