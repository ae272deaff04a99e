// Entry points of the AVX-512 MLA attention (mla-avx512.cpp), for the x86 backend (backend.cpp). Plain C++
// (no intrinsics); the caller owns the scratch so the AVX-512 translation unit instantiates no
// standard-library template.
#pragma once

#include <cstdint>

namespace moxi::kernels::x86 {

struct mla_avx512_scratch {
  float* qt;     // f32 [(L + Dr) * 16]: one query's heads transposed
  float* p;      // f32 [rows * 16]: scores, then probabilities, per attended row
  int64_t* idx;  // i64 [rows]: the attended rows
};

// As ref::mla_attention_absorbed; scratch sized for rows = S.
void mla_attention_absorbed_avx512(const float* q_lat, const float* latent, float* o_lat, int64_t T,
                                   int64_t S, int64_t H, int64_t L, int64_t Dr, float scale,
                                   const mla_avx512_scratch& s);
// As ref::mla_attention_absorbed_sparse (indices already checked < S); scratch sized for rows = topk.
void mla_attention_absorbed_sparse_avx512(const float* q_lat, const float* latent, const int32_t* indices,
                                          float* o_lat, int64_t T, int64_t H, int64_t L, int64_t Dr,
                                          int64_t topk, float scale, const mla_avx512_scratch& s);

// As ref::mla_absorb_q and ref::mla_unabsorb_o (bit-identical).
void mla_absorb_q_avx512(const float* q, const float* wkv_b, float* q_lat, int64_t T, int64_t H, int64_t Dn,
                         int64_t Dr, int64_t Dv, int64_t L);
// The unabsorb reads W_UV transposed (kernels::mla_transpose_uv, f32 [H, L, Dv]): contiguous loads.
void mla_unabsorb_o_avx512(const float* o_lat, const float* wuv_t, float* o, int64_t T, int64_t H, int64_t Dv,
                           int64_t L);

}  // namespace moxi::kernels::x86
