// Attention kinds as plug-ins. Every attention kind (KDA, MLA / Gated DSA, sliding-window attention) is one
// attention_kind_info: how its tensors are declared (manifest) and loaded, how it runs over several
// sequences' prefill chunks and decode steps (attention_layer::forward_batch), what it caches per
// sequence (a constant-size state, snapshotted and restored as a whole by memory/ and runtime/, or
// per-token rows) and what the planner counts for it. The decoder, the contiguous cache, the manifest
// builder and the planner go through this table only; adding a kind is a new entry, its layer file and its
// config fields (formats/model-config.h), plus memory/cache-spec.h when it caches in a new way.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "moxi/formats/model-config.h"
#include "moxi/model/cache.h"
#include "moxi/model/layers/weights.h"
#include "moxi/model/manifest.h"

namespace moxi::model {

namespace arch {
class manifest_builder;
}

// One loaded attention block of a decoder layer.
class attention_layer {
 public:
  virtual ~attention_layer() = default;
  // x f32 [R, hidden] (after input_layernorm) holds several sequences' rows (segs, in order, covering
  // [0, R); a prefill chunk or one decode token each) -> out f32 [R, hidden]. Reads and extends each
  // sequence's cache at `slot`; positions continue from what the cache holds.
  virtual void forward_batch(const formats::model_config& c, const float* x, int64_t R,
                             std::span<const seq_rows> segs, int64_t slot, float* out, const dump_sink* dump,
                             const std::string& name) const = 0;
};

// Element formats of a cache, as the planner counts them (docs/plan.md).
enum class cache_format : uint8_t {
  BF16,  // latent, rope part, indexer key, SWA keys and values and the KDA conv state BF16 (GPU serving)
  FP8,   // FlashMLA-style FP8 latent (512 B + 4 fp32 scales + 64 BF16 rope = 656 B) and 132 B indexer keys
  F32,   // everything f32: what moxi's CPU engine stores (model/cache.h, memory/)
};

// The planner's figures of one layer of a kind (docs/plan.md).
struct attention_plan_figures {
  uint64_t state_bytes = 0;      // per sequence, not growing past the context (KDA state, SWA ring)
  uint64_t token_bytes = 0;      // per sequence and cached token (MLA latent + DSA index key)
  double decode_read_bytes = 0;  // cache bytes one decoded token reads (and writes) at the context
  int tp_split = 1;              // ways tensor parallelism divides the cache (it has a head dimension)
};

struct attention_kind_info {
  formats::attn_kind kind;
  const char* dump_name;  // intermediates under "layers.{i}.<dump_name>.*"
  param_group group;
  // Plan text label of the config's layers of this kind ("KDA", "Gated DSA" or "MLA", "SWA").
  const char* (*label)(const formats::model_config& c);
  // Declares the tensors under prefix ("model.layers.3.self_attn").
  void (*declare)(arch::manifest_builder& b, const std::string& prefix, int64_t layer, param_group group);
  std::unique_ptr<attention_layer> (*load)(weight_loader& ld, const std::string& prefix);
  // f32 floats of the per-sequence state (sequence_cache::state); 0 for a kind that caches rows.
  int64_t (*state_floats)(const formats::model_config& c);
  attention_plan_figures (*plan)(const formats::model_config& c, cache_format cache, int64_t context, int tp);
  // Activation elements one forward of the layer holds at once for `rows` rows at `context` positions, on a
  // tensor-parallel rank of `tp`: its scratch buffers (not the cache, not the decoder's hidden rows), as
  // the planner counts them (docs/plan.md "Activations"). Kept beside each kind's forward.
  double (*work_elems)(const formats::model_config& c, int64_t rows, int64_t context, int tp);
  // Whether those buffers stay with the thread between calls (grow-only scratch the next chunk reuses),
  // so they add to whatever runs after the layer instead of being freed before it.
  bool work_held = false;
};

const attention_kind_info& attention_kind(formats::attn_kind kind);
inline int64_t attention_state_floats(const formats::model_config& c, formats::attn_kind kind) {
  return attention_kind(kind).state_floats(c);
}

}  // namespace moxi::model
