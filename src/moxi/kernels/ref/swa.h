// Scalar reference kernel of sliding-window attention (the SWA layers of Mistral, Gemma 2/3 and gpt-oss):
// causal multi-head softmax attention with grouped KV heads (GQA) where each query sees only the last
// `window` keys, itself included.
//
// Layouts: q f32 [T, H, D], k and v f32 [S, KVH, D], o f32 [T, H, D]; query head h reads KV head
// h / (H / KVH). The T queries are the LAST T of the S keys (as kernels/ref/mla.h attention_causal), so
// query t sits at key index i = S - T + t and sees keys s with i - window < s <= i.
#pragma once

#include <cstdint>

namespace moxi::kernels::ref {

void sliding_window_attention(const float* q,  // f32 [T, H, D]
                              const float* k,  // f32 [S, KVH, D]
                              const float* v,  // f32 [S, KVH, D]
                              float* o,        // f32 [T, H, D]; must not alias the inputs
                              int64_t T, int64_t S, int64_t H, int64_t KVH, int64_t D, int64_t window,
                              float scale);

}  // namespace moxi::kernels::ref
