// KDA kernels on the best variant this CPU has: AVX-512 twins of ref::kda_recurrent (decode; vectorized
// over V, two fused passes over the state) and ref::kda_chunked (prefill; value/key loops vectorized, the
// intra-chunk scores vectorized across 16 columns), each bit-identical to its reference (same operations in
// the same order, no FMA contraction, the same libm exp per element), chosen per call by
// kernels::fast_kernels() (MOXI_KERNELS=ref or a ref_kernels_scope gives the reference). Arguments and
// layouts as in kernels/ref/kda.h.
#pragma once

#include <cstdint>

namespace moxi::kernels {

void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V);
void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V);

}  // namespace moxi::kernels
