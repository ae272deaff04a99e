// Scalar reference MoE router (docs/model-spec.md §3.3, docs/deepseek.md §D): DeepSeek-V3 "noaux_tc"
// routing — fp32 scores, selection on score + e_score_correction_bias, group-limited top-k with excluded
// groups masked to -inf (never 0: biased scores can be negative), weights from the UNbiased scores.
// The experts themselves are composed from ref::matmul and ref::swiglu by the model layer.
#pragma once

#include <cstdint>

namespace moxi::kernels::ref {

enum class RouterScoring {
  kSigmoid,  // s = sigmoid(logit) per expert (DeepSeek-V3, Kimi)
  kSoftmax,  // s = softmax(logits) over all experts (DeepSeek-V2 / Mixtral style)
};

struct RouterConfig {
  int64_t n_experts = 0;   // E
  int64_t top_k = 1;       // experts per token
  int64_t n_group = 1;     // num_expert_group; E % n_group == 0
  int64_t topk_group = 1;  // groups kept per token; top_k <= topk_group * E / n_group
  // Divide the selected weights by (their sum + 1e-20) (HF DeepseekV3 / Kimi). HF Kimi renormalizes only
  // when top_k > 1; the caller encodes that by passing renormalize = moe_renormalize && top_k > 1.
  bool renormalize = true;
  float routed_scaling_factor = 1.0f;
  RouterScoring scoring = RouterScoring::kSigmoid;
};

// Routes T tokens. Per token: s = score(logits); b = s + bias (bias == nullptr: b = s); with n_group > 1,
// group score = sum of the top-2 b in the group (with a bias) or max s (without one; DeepSeek-V3
// inference/model.py Gate), the topk_group best groups are kept and every other expert's b becomes -inf;
// experts = top_k of b; weights = s[experts] (renormalized if asked) * routed_scaling_factor.
// Order and ties: groups and experts are ranked by score descending, the LOWER index winning ties; the
// experts of a row are written in that rank order. NaN ranks below -inf. Allocates O(E) once per call.
void moe_route(const float* logits,  // f32 [T, E] router logits, x W_gate^T in fp32
               const float* bias,    // f32 [E] e_score_correction_bias, or nullptr
               const RouterConfig& cfg,
               int32_t* experts,  // i32 [T, top_k]
               float* weights,    // f32 [T, top_k]
               int64_t T);

}  // namespace moxi::kernels::ref
