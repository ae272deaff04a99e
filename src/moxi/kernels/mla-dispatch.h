// MLA absorbed attention (dense causal and DSA sparse) and the W_UK / W_UV absorption steps on the best
// variant this CPU has: AVX-512 twins of the references that are bit-identical to them (same operations in
// the same order, vectorized across heads for the scores, across the latent width for the weighted sums and
// W_UK, across 16 outputs for W_UV), chosen per call by kernels::fast_kernels()
// (MOXI_KERNELS=ref or a ref_kernels_scope gives the reference). Arguments as in kernels/ref/mla.h.
#pragma once

#include <cstdint>
#include <vector>

namespace moxi::kernels {

void mla_attention_absorbed(const float* q_lat, const float* latent, float* o_lat, int64_t T, int64_t S,
                            int64_t H, int64_t L, int64_t Dr, float scale);
void mla_attention_absorbed_sparse(const float* q_lat, const float* latent, const int32_t* indices,
                                   float* o_lat, int64_t T, int64_t S, int64_t H, int64_t L, int64_t Dr,
                                   int64_t topk, float scale);

void mla_absorb_q(const float* q, const float* wkv_b, float* q_lat, int64_t T, int64_t H, int64_t Dn,
                  int64_t Dr, int64_t Dv, int64_t L);
// W_UV of every head transposed, f32 [H, L, Dv]: wuv_t[(h*L + l)*Dv + j] = W_UV_h[j][l] (row h*(Dn+Dv) + Dn
// + j of wkv_b). Made once at load so the AVX-512 unabsorb loads 16 outputs' weights contiguously instead of
// gathering them with stride L (same values, same order: bit-identical).
std::vector<float> mla_transpose_uv(const float* wkv_b, int64_t H, int64_t Dn, int64_t Dv, int64_t L);

// wuv_t: mla_transpose_uv(wkv_b, ...) for the AVX-512 twin, or null (then the reference runs). The
// reference reads wkv_b either way.
void mla_unabsorb_o(const float* o_lat, const float* wkv_b, const float* wuv_t, float* o, int64_t T,
                    int64_t H, int64_t Dn, int64_t Dv, int64_t L);

}  // namespace moxi::kernels
