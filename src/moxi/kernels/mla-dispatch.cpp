// MLA attention dispatch: the AVX-512 twins where the CPU has AVX-512 and fast kernels are on, else the
// scalar reference.
#include "moxi/kernels/mla-dispatch.h"

#include <vector>

#include "moxi/base/error.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/kernels/x86/cpu.h"
#include "moxi/kernels/x86/mla-x86.h"

namespace moxi::kernels {

namespace {

bool use_avx512() {
  return fast_kernels() && x86::cpu().avx512;
}

// Grow-only per-thread scratch for `rows` attended rows of width Wl.
x86::mla_avx512_scratch scratch(int64_t rows, int64_t Wl) {
  thread_local std::vector<float> qt, p;
  thread_local std::vector<int64_t> idx;
  if (qt.size() < size_t(Wl * 16)) qt.resize(size_t(Wl * 16));
  if (p.size() < size_t(rows * 16)) p.resize(size_t(rows * 16));
  if (idx.size() < size_t(rows)) idx.resize(size_t(rows));
  return {qt.data(), p.data(), idx.data()};
}

}  // namespace

void mla_attention_absorbed(const float* q_lat, const float* latent, float* o_lat, int64_t T, int64_t S,
                            int64_t H, int64_t L, int64_t Dr, float scale) {
#if defined(__x86_64__)
  if (use_avx512()) {
    MOXI_ASSERT(S >= T);
    return x86::mla_attention_absorbed_avx512(q_lat, latent, o_lat, T, S, H, L, Dr, scale,
                                              scratch(S, L + Dr));
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
    return x86::mla_attention_absorbed_sparse_avx512(q_lat, latent, indices, o_lat, T, H, L, Dr, topk, scale,
                                                     scratch(topk, L + Dr));
  }
#endif
  ref::mla_attention_absorbed_sparse(q_lat, latent, indices, o_lat, T, S, H, L, Dr, topk, scale);
}

void mla_absorb_q(const float* q, const float* wkv_b, float* q_lat, int64_t T, int64_t H, int64_t Dn,
                  int64_t Dr, int64_t Dv, int64_t L) {
#if defined(__x86_64__)
  if (use_avx512()) return x86::mla_absorb_q_avx512(q, wkv_b, q_lat, T, H, Dn, Dr, Dv, L);
#endif
  ref::mla_absorb_q(q, wkv_b, q_lat, T, H, Dn, Dr, Dv, L);
}

std::vector<float> mla_transpose_uv(const float* wkv_b, int64_t H, int64_t Dn, int64_t Dv, int64_t L) {
  std::vector<float> t(size_t(H * L * Dv));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t j = 0; j < Dv; ++j) {
      const float* row = wkv_b + (h * (Dn + Dv) + Dn + j) * L;
      for (int64_t l = 0; l < L; ++l) t[size_t((h * L + l) * Dv + j)] = row[l];
    }
  return t;
}

void mla_unabsorb_o(const float* o_lat, const float* wkv_b, const float* wuv_t, float* o, int64_t T,
                    int64_t H, int64_t Dn, int64_t Dv, int64_t L) {
#if defined(__x86_64__)
  if (use_avx512() && wuv_t) return x86::mla_unabsorb_o_avx512(o_lat, wuv_t, o, T, H, Dv, L);
#endif
  ref::mla_unabsorb_o(o_lat, wkv_b, o, T, H, Dn, Dv, L);
}

}  // namespace moxi::kernels
