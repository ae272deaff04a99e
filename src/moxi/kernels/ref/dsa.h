// Scalar reference kernels for the DeepSeek Sparse Attention lightning indexer (docs/model-spec.md §3.2,
// docs/deepseek.md §A.3-A.4): index scores and per-query top-k selection.
//
// Causality as in mla.h: the T queries are the last T of S keys, query t sees keys s <= S-T+t.
// The production path (Hadamard rotation, FP8 q/k with per-vector scales) is not modelled here: in exact
// arithmetic it gives the same scores, which is what this reference computes (DS32 paper Eq. 1).
#pragma once

#include <cmath>
#include <cstdint>

namespace moxi::kernels::ref {

// I[t,s] = sum_j w[t,j] * ReLU(q_I[t,j] . k_I[s]) for causal s; -inf for s > S-T+t, so the whole row is
// defined. w already carries weights_proj(x) * H_I^-0.5 * D_I^-0.5. RoPE (half-split, rope dims first)
// is applied to q_I and k_I by the caller.
void indexer_scores(const float* q,  // f32 [T, HI, D]  indexer queries
                    const float* k,  // f32 [S, D]      indexer keys, one per token, shared by all heads
                    const float* w,  // f32 [T, HI]     per-head weights
                    float* scores,   // f32 [T, S]
                    int64_t T, int64_t S, int64_t HI, int64_t D);

// Top-k key positions per query among its causal candidates s <= S-T+t, by score. Output row order:
// score descending, ties broken by the LOWER position first (a deterministic rule; torch.topk and the
// radix kernels of vLLM/SGLang do not promise one). NaN scores rank below -inf. With fewer than k
// candidates every candidate is selected and the row is padded with -1 (vLLM's topk_indices_buffer).
void indexer_topk(const float* scores,  // f32 [T, S]
                  int32_t* indices,     // i32 [T, k]
                  int64_t T, int64_t S, int64_t k);

// indexer_topk's order, a strict total order on (score, position) pairs: whether candidate a ranks before b.
// Anything that selects top-k positions in pieces (model/layers/mla.cpp under tensor parallelism) uses it
// so that its rows equal indexer_topk's.
inline bool indexer_ranks_before(float score_a, int64_t pos_a, float score_b, int64_t pos_b) {
  const bool nan_a = std::isnan(score_a), nan_b = std::isnan(score_b);
  if (nan_a != nan_b) return nan_b;  // NaN ranks below everything, -inf included
  if (!nan_a && score_a != score_b) return score_a > score_b;
  return pos_a < pos_b;
}

}  // namespace moxi::kernels::ref
