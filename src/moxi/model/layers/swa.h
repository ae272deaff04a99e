// The sliding-window attention layer (Mistral, Gemma 2/3, gpt-oss; formats::swa_config): GQA projections,
// half-split RoPE over the whole head, softmax over the last `window` keys (itself included), o_proj. Its
// cache is a ring buffer of the last `window` keys and values (cache.h swa_ring_ref), so a sequence's
// cache stays constant in context, like a KDA state.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/cache.h"
#include "moxi/model/layers/weights.h"

namespace moxi::model {

struct swa_weights {
  stacked_linear qkv;           // q_proj [H*D, hidden], k_proj and v_proj [KVH*D, hidden], stacked
  linear o_proj;                // [hidden, H*D]
  std::vector<double> inv_freq;  // f64 [D/2]
  double rope_attention_factor = 1.0;
  float softmax_scale = 0.0f;  // D^-0.5 (times the YaRN mscale^2 when the config scales RoPE)
};

// prefix: "model.layers.{i}.self_attn".
swa_weights load_swa(weight_loader& ld, const std::string& prefix);

// Floats of one layer's ring: keys then values, [window, KVH*D] each.
int64_t swa_state_floats(const formats::swa_config& s);
swa_ring_ref swa_ring(float* state, const formats::swa_config& s);

// x f32 [R, hidden] (segs as in attention_layer::forward_batch) -> out f32 [R, hidden]. Sequence i's new
// tokens sit at positions cache.length() ...; each attends to the ring's last window-1 positions and the
// chunk's own earlier tokens, then the chunk's last `window` keys and values replace the oldest ring rows.
void swa_forward_batch(const swa_weights& w, const formats::model_config& c, const float* x, int64_t R,
                       std::span<const seq_rows> segs, int64_t layer, float* out, const dump_sink* dump,
                       const std::string& name);

}  // namespace moxi::model
