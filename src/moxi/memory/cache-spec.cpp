// cache_spec from a model_config: the per-slot attention kinds and the widths the caches store.
#include "moxi/memory/cache-spec.h"

#include <algorithm>

namespace moxi::memory {

cache_spec cache_spec::from_config(const formats::model_config& c) {
  cache_spec s;
  s.layers = c.layer_attn;
  for (int64_t k = 0; k < c.num_mtp_layers; ++k)
    s.layers.push_back(c.mla ? formats::attn_kind::MLA : formats::attn_kind::KDA);
  if (c.mla) s.latent_width = c.mla->kv_lora_rank + c.mla->qk_rope_head_dim;
  if (c.dsa) s.index_width = c.dsa->index_head_dim;
  if (c.kda) {
    s.kda_heads = c.kda->num_heads;
    s.kda_head_dim = c.kda->head_dim;
    s.kda_conv_kernel = c.kda->conv_kernel;
  }
  return s;
}

int64_t cache_spec::num_kda_layers() const {
  return std::count(layers.begin(), layers.end(), formats::attn_kind::KDA);
}

int64_t cache_spec::num_mla_layers() const {
  return std::count(layers.begin(), layers.end(), formats::attn_kind::MLA);
}

size_t cache_spec::bytes_per_block(int64_t block_size) const {
  return size_t(num_mla_layers() * block_size * token_floats()) * sizeof(float);
}

size_t cache_spec::bytes_per_state_slot() const {
  return size_t(num_kda_layers() * kda_layer_floats()) * sizeof(float);
}

}  // namespace moxi::memory
