// The KDA layer (docs/model-spec.md §3.1, docs/kimi-linear.md §1.2): weights, loader and forward over the
// reference kernels, with the per-sequence conv and recurrent state from the cache.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/cache.h"
#include "moxi/model/layers/weights.h"

namespace moxi::model {

struct kda_weights {
  // Every projection of x, stacked at load in kda_in order: q_proj, k_proj, v_proj [P, hidden], f_a_proj
  // [D, hidden], b_proj [H, hidden], then the full-rank output gate g_proj [P, hidden] or the low-rank
  // g_a_proj [D, hidden].
  stacked_linear in_proj;
  std::vector<float> q_conv, k_conv, v_conv;  // f32 [W, P], tap-major (checkpoint [P, 1, W] transposed)
  linear f_b;                                 // [P, D]
  std::vector<float> A_log;                   // f32 [H] (checkpoint [1, 1, H, 1])
  std::vector<float> dt_bias;                 // f32 [P]
  linear g_b;                                 // low-rank output gate [P, D], or empty
  std::vector<float> o_norm;                  // f32 [D], shared by all heads
  linear o_proj;                              // [hidden, P]
};

// The parts of kda_weights::in_proj.
enum kda_in : size_t { KDA_Q, KDA_K, KDA_V, KDA_F_A, KDA_BETA, KDA_GATE /* g_proj, or g_a */ };

// prefix: "model.layers.{i}.self_attn".
kda_weights load_kda(weight_loader& ld, const std::string& prefix);

// x f32 [T, hidden] (after input_layernorm) -> out f32 [T, hidden]. Consumes and updates `state`.
// T > 1 runs the chunkwise prefill kernel, T == 1 the recurrence (the two agree; tested).
void kda_forward(const kda_weights& w, const formats::model_config& c, const float* x, int64_t T,
                 const kda_state_ref& state, float* out, const dump_sink* dump, const std::string& name);

// Batched: x f32 [R, hidden] holds several sequences' rows (segs, in order, covering [0, R)); sequence i
// uses states[i]. The projections run once over all R rows, the convs and the recurrence per sequence.
// Equal to kda_forward per sequence (bit for bit on the reference kernels). traces (empty, or one per
// sequence): a sequence with a non-null trace runs its convs and recurrence token by token, as decode does,
// and its whole state (the kda_state_ref layout) after token t is copied to trace + t * state floats
// (speculative decoding, sequence_cache::state_trace).
void kda_forward_batch(const kda_weights& w, const formats::model_config& c, const float* x, int64_t R,
                       std::span<const seq_rows> segs, std::span<const kda_state_ref> states, float* out,
                       const dump_sink* dump, const std::string& name, std::span<float* const> traces = {});

}  // namespace moxi::model
