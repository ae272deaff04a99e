// MLA attention dispatch: the AVX-512 twins where the CPU has AVX-512 and fast kernels are on, else the
// scalar reference.
#include "moxi/kernels/mla-dispatch.h"

#include "moxi/base/error.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/kernels/x86/cpu.h"

namespace moxi::kernels {

#if defined(__x86_64__)
namespace x86 {
// kernels/x86/mla-avx512.cpp
void mla_attention_absorbed_avx512(const float* q_lat, const float* latent, float* o_lat, int64_t T,
                                   int64_t S, int64_t H, int64_t L, int64_t Dr, float scale);
void mla_attention_absorbed_sparse_avx512(const float* q_lat, const float* latent, const int32_t* indices,
                                          float* o_lat, int64_t T, int64_t H, int64_t L, int64_t Dr,
                                          int64_t topk, float scale);
}  // namespace x86
#endif

namespace {
bool use_avx512() {
  return fast_kernels() && x86::cpu().avx512;
}
}  // namespace

void mla_attention_absorbed(const float* q_lat, const float* latent, float* o_lat, int64_t T, int64_t S,
                            int64_t H, int64_t L, int64_t Dr, float scale) {
#if defined(__x86_64__)
  if (use_avx512()) {
    MOXI_ASSERT(S >= T);
    return x86::mla_attention_absorbed_avx512(q_lat, latent, o_lat, T, S, H, L, Dr, scale);
  }
#endif
  ref::mla_attention_absorbed(q_lat, latent, o_lat, T, S, H, L, Dr, scale);
}

void mla_attention_absorbed_sparse(const float* q_lat, const float* latent, const int32_t* indices,
                                   float* o_lat, int64_t T, int64_t S, int64_t H, int64_t L, int64_t Dr,
                                   int64_t topk, float scale) {
#if defined(__x86_64__)
  if (use_avx512()) {
    for (int64_t i = 0; i < T * topk; ++i)
      MOXI_ASSERT(indices[i] < S, "sparse attention index past the latent cache");
    return x86::mla_attention_absorbed_sparse_avx512(q_lat, latent, indices, o_lat, T, H, L, Dr, topk, scale);
  }
#endif
  ref::mla_attention_absorbed_sparse(q_lat, latent, indices, o_lat, T, S, H, L, Dr, topk, scale);
}

}  // namespace moxi::kernels
