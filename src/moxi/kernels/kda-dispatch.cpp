// KDA dispatch: the AVX-512 recurrent step and chunked prefill where the CPU has AVX-512 and fast kernels
// are on, else the scalar references. Scratch is grow-only per thread.
#include "moxi/kernels/kda-dispatch.h"

#include <cstddef>
#include <vector>

#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/kda.h"
#include "moxi/kernels/x86/cpu.h"
#include "moxi/kernels/x86/kda-x86.h"

namespace moxi::kernels {

#if defined(__x86_64__)
static_assert(x86::kKdaChunk == ref::kda_chunk_size, "the AVX-512 chunked prefill must use the same chunks");
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

void kda_chunked(const float* q, const float* k, const float* v, const float* g, const float* beta,
                 float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V) {
#if defined(__x86_64__)
  if (fast_kernels() && x86::cpu().avx512) {
    const int64_t C = ref::kda_chunk_size;
    thread_local std::vector<double> G, GT;
    thread_local std::vector<float> KT, Aqk, L, Wm, U, decay;
    auto grow = [](auto& buf, int64_t n) {
      if (buf.size() < std::size_t(n)) buf.resize(std::size_t(n));
      return buf.data();
    };
    const x86::kda_chunk_scratch w{grow(G, C * K), grow(GT, K * C), grow(KT, K * C), grow(Aqk, C * C),
                                   grow(L, C * C), grow(Wm, C * K), grow(U, C * V),  grow(decay, C * K)};
    return x86::kda_chunked_avx512(q, k, v, g, beta, scale, state, o, T, H, K, V, w);
  }
#endif
  ref::kda_chunked(q, k, v, g, beta, scale, state, o, T, H, K, V);
}

}  // namespace moxi::kernels
