// One pre-norm decoder layer (docs/model-spec.md §3: h = x + Attn(RMSNorm(x)); out = h + FFN(RMSNorm(h))) with the
// attention of its kind (layers/attention.h: KDA, MLA/DSA or sliding-window) and a dense or MoE FFN, and
// the MTP head around such a layer (docs/model-spec.md §3.4).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "moxi/model/arch/registry.h"
#include "moxi/model/cache.h"
#include "moxi/model/layers/attention.h"
#include "moxi/model/layers/ffn.h"

namespace moxi::model {

struct decoder_layer {
  int64_t slot = 0;                // cache slot (layer index; MTP layers follow the main ones)
  std::vector<float> input_norm;   // f32 [hidden]
  std::vector<float> post_norm;    // f32 [hidden]
  formats::attn_kind kind = formats::attn_kind::KDA;
  std::shared_ptr<const attention_layer> attn;
  std::optional<swiglu_mlp> mlp;  // exactly one of mlp / moe
  std::optional<moe_weights> moe;
  // The layout this rank runs in, or null in one process. With tp > 1 the attention output and the dense
  // FFN output are this rank's heads' / columns' partial sums, all-reduced over the tp group.
  std::shared_ptr<const parallel_layout> parallel;
};

decoder_layer load_decoder_layer(weight_loader& ld, const arch::layer_layout& layout,
                                 const arch::ffn_names& ffn, int64_t slot);

// h f32 [T, hidden], updated in place (the residual stream). name: "layers.3" for dumps.
void decoder_layer_forward(const decoder_layer& l, const formats::model_config& c, float* h, int64_t T,
                           sequence_cache& cache, const dump_sink* dump, const std::string& name);

// Batched: h f32 [R, hidden] holds several sequences' rows (segs, in order, covering [0, R)). Norms, FFN
// and every projection run once over all rows; attention runs per sequence on its own cache.
void decoder_layer_forward_batch(const decoder_layer& l, const formats::model_config& c, float* h, int64_t R,
                                 std::span<const seq_rows> segs, const dump_sink* dump,
                                 const std::string& name);

// MTP layer: h' = Block(eh_proj([enorm(emb(t_{i+1})) ; hnorm(h_i)])), then shared_head.norm; the embedding
// and lm_head are the main model's.
struct mtp_layer {
  std::vector<float> enorm, hnorm;  // f32 [hidden]
  linear eh_proj;                   // [hidden, 2*hidden]: input [embedding ; hidden] (embedding FIRST)
  decoder_layer block;
  std::vector<float> head_norm;  // f32 [hidden] shared_head.norm
};

mtp_layer load_mtp_layer(weight_loader& ld, const arch::layer_layout& layout, const arch::ffn_names& ffn,
                         int64_t slot);

}  // namespace moxi::model
