// MLA absorbed attention (dense causal and DSA sparse) on the best variant this CPU has: an AVX-512 twin
// of the reference that is bit-identical to it (same operations in the same order, vectorized across heads
// for the scores and across the latent width for the outputs), chosen per call by kernels::fast_kernels()
// (MOXI_KERNELS=ref or a ref_kernels_scope gives the reference). Arguments as in kernels/ref/mla.h.
#pragma once

#include <cstdint>

namespace moxi::kernels {

void mla_attention_absorbed(const float* q_lat, const float* latent, float* o_lat, int64_t T, int64_t S,
                            int64_t H, int64_t L, int64_t Dr, float scale);
void mla_attention_absorbed_sparse(const float* q_lat, const float* latent, const int32_t* indices,
                                   float* o_lat, int64_t T, int64_t S, int64_t H, int64_t L, int64_t Dr,
                                   int64_t topk, float scale);

}  // namespace moxi::kernels
