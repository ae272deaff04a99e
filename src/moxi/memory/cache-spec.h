// cache_spec: what one sequence caches per layer slot, read from a model_config, so that memory/ sizes its
// pools without knowing the model code. Slots follow model/cache.h: decoder layers 0..num_layers-1, then
// MTP layer k at slot num_layers + k.
//
// Attention kinds cache in one of two ways (vLLM v1's KV-cache spec kinds, one cache manager each in
// hybrid_memory): a STATE of constant size per sequence (KDA: conv + recurrent state; sliding-window
// attention: the ring of its last `window` keys and values), kept in state slots and snapshotted whole at
// block boundaries for prefix reuse; or PAGED per-token rows (MLA / Gated DSA latents and index keys) in
// blocks shared through the prefix cache.
#pragma once

#include <cstdint>
#include <vector>

#include "moxi/formats/model-config.h"

namespace moxi::memory {

enum class cache_kind : uint8_t { STATE, PAGED };
cache_kind cache_kind_of(formats::attn_kind kind);

struct cache_spec {
  std::vector<formats::attn_kind> layers;  // one per cache slot
  int64_t latent_width = 0;                // MLA: kv_lora_rank + qk_rope_head_dim floats per token
  // DSA: one cached index key per token as 4-byte words: its FP8 row (kernels/ref/dsa.h index_key_bytes:
  // the codes padded to whole words, then the fp32 scale), stored and copied here as opaque words; 0 without.
  int64_t index_width = 0;
  int64_t kda_heads = 0;        // H
  int64_t kda_head_dim = 0;     // K = V
  int64_t kda_conv_kernel = 0;  // W
  int64_t swa_window = 0;       // sliding-window layers: ring rows
  int64_t swa_kv_dim = 0;       // floats of one key (= of one value): KV heads * head_dim
  // Per slot: whether this process stores it (a pipeline stage holds its own layers' caches only); empty:
  // every slot. Decisions that depend on the model's layers (snapshots, block-aligned steps) still see all
  // of them, so every stage of a serving group schedules alike.
  std::vector<bool> held;
  bool holds(size_t slot) const { return held.empty() || held.at(slot); }

  // MTP slots are MLA when the model has MLA layers, else KDA: the rule of the model/arch layouts
  // (kimi-linear.cpp, deepseek-v3.cpp), repeated here because memory/ sits below model/.
  static cache_spec from_config(const formats::model_config& config);

  int64_t num_layers_of(formats::attn_kind kind) const;
  int64_t num_kda_layers() const { return num_layers_of(formats::attn_kind::KDA); }
  int64_t num_mla_layers() const { return num_layers_of(formats::attn_kind::MLA); }
  int64_t num_swa_layers() const { return num_layers_of(formats::attn_kind::SWA); }
  int64_t num_layers_of(cache_kind kind) const;
  int64_t num_state_layers() const { return num_layers_of(cache_kind::STATE); }
  int64_t num_paged_layers() const { return num_layers_of(cache_kind::PAGED); }

  int64_t kda_proj_dim() const { return kda_heads * kda_head_dim; }  // P
  int64_t conv_floats() const { return kda_conv_kernel > 0 ? (kda_conv_kernel - 1) * kda_proj_dim() : 0; }
  int64_t recurrent_floats() const { return kda_heads * kda_head_dim * kda_head_dim; }  // [H, K, V]
  int64_t kda_layer_floats() const { return 3 * conv_floats() + recurrent_floats(); }
  int64_t swa_layer_floats() const { return 2 * swa_window * swa_kv_dim; }  // keys then values
  // The state floats of one layer of a STATE kind (model/layers/attention.h state_floats, the same sizes).
  int64_t state_floats(formats::attn_kind kind) const;
  int64_t token_floats() const { return latent_width + index_width; }  // 4-byte words per MLA layer per token

  // Bytes one block of `block_size` tokens holds over the held paged layers, and one state slot over the
  // held state layers.
  size_t bytes_per_block(int64_t block_size) const;
  size_t bytes_per_state_slot() const;
};

}  // namespace moxi::memory
