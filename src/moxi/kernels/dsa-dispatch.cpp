// DSA indexer dispatch: the AVX-512 scores where the CPU has AVX-512 and fast kernels are on, else the
// scalar reference. Scratch is grow-only per thread.
#include "moxi/kernels/dsa-dispatch.h"

#include <cstddef>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/kernels/x86/cpu.h"

namespace moxi::kernels {

#if defined(__x86_64__)
namespace x86 {
// kernels/x86/dsa-avx512.cpp; kt scratch f32 [D * 16].
void indexer_scores_avx512(const float* q, const float* k, const float* w, float* scores, int64_t T,
                           int64_t S, int64_t HI, int64_t D, float* kt);
}  // namespace x86
#endif

void indexer_scores(const float* q, const float* k, const float* w, float* scores, int64_t T, int64_t S,
                    int64_t HI, int64_t D) {
#if defined(__x86_64__)
  if (fast_kernels() && x86::cpu().avx512) {
    MOXI_ASSERT(S >= T);
    thread_local std::vector<float> kt;
    if (kt.size() < std::size_t(D * 16)) kt.resize(std::size_t(D * 16));
    return x86::indexer_scores_avx512(q, k, w, scores, T, S, HI, D, kt.data());
  }
#endif
  ref::indexer_scores(q, k, w, scores, T, S, HI, D);
}

}  // namespace moxi::kernels
