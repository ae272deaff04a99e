// KDA kernels on the best variant this CPU has: the recurrent (decode) step runs an AVX-512 twin of
// ref::kda_recurrent that is bit-identical to it (same operations in the same order, vectorized over V and
// fused into two passes over the state), chosen per call by kernels::fast_kernels() (MOXI_KERNELS=ref or a
// ref_kernels_scope gives the reference). Arguments and layouts as in kernels/ref/kda.h.
#pragma once

#include <cstdint>

namespace moxi::kernels {

void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V);

}  // namespace moxi::kernels
