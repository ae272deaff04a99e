// Entry points of the AVX-512 KDA kernels (kda-avx512.cpp), for the x86 backend (backend.cpp). Plain C++ (no
// intrinsics); the caller owns the scratch so the AVX-512 translation unit instantiates no standard-library
// template.
#pragma once

#include <cstdint>

namespace moxi::kernels::x86 {

inline constexpr int64_t kKdaChunk = 64;  // = ref::kda_chunk_size (checked in backend.cpp)
inline constexpr int64_t kKdaSubChunk = 16;  // ref::kda_sub_chunk

// As ref::kda_recurrent; delta f32 [V] scratch.
void kda_recurrent_avx512(const float* q, const float* k, const float* v, const float* g, const float* beta,
                          float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V,
                          float* delta);

// Workspace of the chunked prefill (C = kKdaChunk).
struct kda_chunk_scratch {
  double* G;     // [C, K] in-chunk inclusive cumsum of g
  double* GT;    // [K, C] its transpose
  float* KT;     // [K, C] the chunk's keys transposed
  float* Aqk;    // [C, C]
  float* L;      // [C, C]
  float* Wm;     // [C, K]
  float* U;      // [C, V]
  float* decay;  // [C, K]
  float* KFT;    // [K, C] exp(G_e - G_c) k_c transposed, e the end of c's sub-chunk
  float* QE;     // [C / kKdaSubChunk, K] one row's q_r exp(G_r - G_e) per earlier sub-chunk
  float* KE;     // [C / kKdaSubChunk, K] the same with k_r
};

// As ref::kda_chunked, bit-identical to it.
void kda_chunked_avx512(const float* q, const float* k, const float* v, const float* g, const float* beta,
                        float scale, float* state, float* o, int64_t T, int64_t H, int64_t K, int64_t V,
                        const kda_chunk_scratch& scratch);

// y[i] = ref::exp_f32(x[i]), computed 16 lanes at a time by the exp the kernels above use (exposed for
// tests/kernels/exp-test.cpp, which checks the two forms are bit-identical). x and y may alias.
void exp_avx512(const float* x, float* y, int64_t n);

}  // namespace moxi::kernels::x86
