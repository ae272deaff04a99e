// KDA dispatch: the AVX-512 recurrent step where the CPU has AVX-512 and fast kernels are on, else the
// scalar reference.
#include "moxi/kernels/kda-dispatch.h"

#include <cstddef>
#include <vector>

#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/kda.h"
#include "moxi/kernels/x86/cpu.h"

namespace moxi::kernels {

#if defined(__x86_64__)
namespace x86 {
// kernels/x86/kda-avx512.cpp
void kda_recurrent_avx512(const float* q, const float* k, const float* v, const float* g, const float* beta,
                          float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V,
                          float* delta /* f32 [V] scratch */);
}  // namespace x86
#endif

void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta,
                   float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V) {
#if defined(__x86_64__)
  if (fast_kernels() && x86::cpu().avx512) {
    thread_local std::vector<float> delta;
    if (delta.size() < std::size_t(V)) delta.resize(std::size_t(V));
    return x86::kda_recurrent_avx512(q, k, v, g, beta, scale, state, o, T, H, K, V, delta.data());
  }
#endif
  ref::kda_recurrent(q, k, v, g, beta, scale, state, o, T, H, K, V);
}

}  // namespace moxi::kernels
