// Scalar reference kernels for the DeepSeek Sparse Attention lightning indexer (docs/model-spec.md §3.2,
// docs/deepseek.md §A.3-A.4): index scores and per-query top-k selection.
//
// Causality as in mla.h: the T queries are the last T of S keys, query t sees keys s <= S-T+t.
// Index keys are cached in FP8 as DeepSeek-V3.2 caches them (docs/deepseek.md §A.4): each key row holds its
// D E4M3 codes and then one fp32 power-of-two scale (mx::quantize_fp8_row), index_key_bytes(D) bytes, so a
// decode step's scan reads a quarter of the bytes of f32 keys. The queries stay f32 (DeepSeek also rounds
// them to FP8 and rotates both by a Hadamard transform, which in exact arithmetic changes no score).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace moxi::kernels::ref {

// Bytes of one cached index key of D dimensions: D E4M3 codes padded with zeros to a multiple of 4, then
// the fp32 scale (D + 4 for every D the configs use), so that a row is a whole number of 4-byte words.
constexpr int64_t index_key_scale_offset(int64_t D) {
  return (D + 3) / 4 * 4;
}
constexpr int64_t index_key_bytes(int64_t D) {
  return index_key_scale_offset(D) + 4;
}
inline float index_key_scale(const uint8_t* row, int64_t D) {
  float s;
  std::memcpy(&s, row + index_key_scale_offset(D), 4);
  return s;
}
// The T keys k f32 [T, D] as cache rows u8 [T, index_key_bytes(D)].
void quantize_index_keys(const float* k, uint8_t* rows, int64_t T, int64_t D);
// One cache row decoded to f32 [D] (code value times scale, as mx::fake_quantize_fp8_row gives).
void dequantize_index_key(const uint8_t* row, int64_t D, float* out);

// I[t,s] = sum_j w[t,j] * ReLU(scale_s * (q_I[t,j] . c_s)) for causal s, where c_s are key s's E4M3 code
// values; -inf for s > S-T+t, so the whole row is defined. Exactly: dot = fma(q[d], c_s[d], dot) over d in
// order from 0, v = dot * scale_s, acc = fma(w[t,j], max(v, 0), acc) over j in order from 0 (a power-of-two
// scale makes the product with it exact, so this equals the dot with the decoded key barring underflow).
// w already carries weights_proj(x) * H_I^-0.5 * D_I^-0.5. RoPE (half-split, rope dims first) is applied to
// q_I and to k_I before it is quantized, by the caller.
void indexer_scores(const float* q,    // f32 [T, HI, D]  indexer queries
                    const uint8_t* k,  // u8 [S, index_key_bytes(D)] indexer keys, one per token, all heads
                    const float* w,    // f32 [T, HI]     per-head weights
                    float* scores,     // f32 [T, S]
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
