// DSA indexer scores on the best variant this CPU has: an AVX-512 twin of ref::indexer_scores (16 keys per
// vector, each lane doing the reference's loops in its order) that is bit-identical to it, chosen per call
// by kernels::fast_kernels() (MOXI_KERNELS=ref or a ref_kernels_scope gives the reference). Arguments as in
// kernels/ref/dsa.h; the top-k stays ref::indexer_topk (a partial sort).
#pragma once

#include <cstdint>

namespace moxi::kernels {

void indexer_scores(const float* q, const float* k, const float* w, float* scores, int64_t T, int64_t S,
                    int64_t HI, int64_t D);

}  // namespace moxi::kernels
