// cache_spec from a model_config: the per-slot attention kinds and the widths the caches store.
#include "moxi/memory/cache-spec.h"

#include <algorithm>

#include "moxi/base/error.h"

namespace moxi::memory {

cache_kind cache_kind_of(formats::attn_kind kind) {
  switch (kind) {
    case formats::attn_kind::KDA:
    case formats::attn_kind::SWA:
      return cache_kind::STATE;
    case formats::attn_kind::MLA:
      return cache_kind::PAGED;
  }
  throw error("unknown attention kind " + std::to_string(int(kind)));
}

cache_spec cache_spec::from_config(const formats::model_config& c) {
  cache_spec s;
  s.layers = c.layer_attn;
  for (int64_t k = 0; k < c.num_mtp_layers; ++k)
    s.layers.push_back(c.mla ? formats::attn_kind::MLA : formats::attn_kind::KDA);
  if (c.mla) s.latent_width = c.mla->kv_lora_rank + c.mla->qk_rope_head_dim;
  // kernels/ref/dsa.h index_key_bytes(D) / 4, repeated here because memory/ sits below kernels/.
  if (c.dsa) s.index_width = (c.dsa->index_head_dim + 3) / 4 + 1;
  if (c.kda) {
    s.kda_heads = c.kda->num_heads;
    s.kda_head_dim = c.kda->head_dim;
    s.kda_conv_kernel = c.kda->conv_kernel;
  }
  if (c.swa) {
    s.swa_window = c.swa->window;
    s.swa_kv_dim = c.swa->kv_dim();
  }
  return s;
}

int64_t cache_spec::num_layers_of(formats::attn_kind kind) const {
  return std::count(layers.begin(), layers.end(), kind);
}

int64_t cache_spec::num_layers_of(cache_kind kind) const {
  return std::count_if(layers.begin(), layers.end(), [&](auto k) { return cache_kind_of(k) == kind; });
}

int64_t cache_spec::state_floats(formats::attn_kind kind) const {
  switch (kind) {
    case formats::attn_kind::KDA:
      return kda_layer_floats();
    case formats::attn_kind::SWA:
      return swa_layer_floats();
    case formats::attn_kind::MLA:
      return 0;
  }
  return 0;
}

size_t cache_spec::bytes_per_block(int64_t block_size) const {
  int64_t mla = 0;
  for (size_t l = 0; l < layers.size(); ++l) mla += holds(l) && layers[l] == formats::attn_kind::MLA;
  return size_t(mla * block_size * token_floats()) * sizeof(float);
}

size_t cache_spec::bytes_per_state_slot() const {
  int64_t n = 0;
  for (size_t l = 0; l < layers.size(); ++l)
    if (holds(l)) n += state_floats(layers[l]);
  return size_t(n) * sizeof(float);
}

}  // namespace moxi::memory
