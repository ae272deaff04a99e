// The contiguous per-sequence cache: zero-initialized KDA states (a fresh sequence), MLA rows grown on
// demand. Slot kinds follow the architecture layout; the MTP slots follow the same rule as the manifest.
#include "moxi/model/cache.h"

#include "moxi/base/error.h"
#include "moxi/model/arch/registry.h"

namespace moxi::model {

contiguous_cache::contiguous_cache(const formats::model_config& c) {
  const auto layout = arch::find_architecture(c).layout(c);
  if (c.mla) latent_width_ = c.mla->kv_lora_rank + c.mla->qk_rope_head_dim;
  if (c.dsa) index_width_ = c.dsa->index_head_dim;
  auto add = [&](const arch::layer_layout& l) {
    slot s;
    s.kind = l.attn;
    if (l.attn == formats::attn_kind::KDA) {
      const auto& k = *c.kda;
      const size_t conv = size_t((k.conv_kernel - 1) * k.proj_dim());
      s.conv_q.assign(conv, 0.0f);
      s.conv_k.assign(conv, 0.0f);
      s.conv_v.assign(conv, 0.0f);
      s.recurrent.assign(size_t(k.num_heads * k.head_dim * k.head_dim), 0.0f);
    }
    slots_.push_back(std::move(s));
  };
  for (const auto& l : layout.layers) add(l);
  for (const auto& l : layout.mtp_layers) add(l);
}

contiguous_cache::slot& contiguous_cache::at(int64_t layer, formats::attn_kind kind) {
  MOXI_ASSERT(layer >= 0 && size_t(layer) < slots_.size());
  slot& s = slots_[size_t(layer)];
  MOXI_ASSERT(s.kind == kind, "cache slot of the wrong attention kind");
  return s;
}

kda_state_ref contiguous_cache::kda(int64_t layer) {
  slot& s = at(layer, formats::attn_kind::KDA);
  return {s.conv_q.data(), s.conv_k.data(), s.conv_v.data(), s.recurrent.data()};
}

mla_append_ref contiguous_cache::mla_append(int64_t layer, int64_t T) {
  slot& s = at(layer, formats::attn_kind::MLA);
  const int64_t old = s.rows;
  s.rows += T;
  s.latent.resize(size_t(s.rows * latent_width_));
  if (index_width_) s.index_keys.resize(size_t(s.rows * index_width_));
  return {s.latent.data() + old * latent_width_,
          index_width_ ? s.index_keys.data() + old * index_width_ : nullptr};
}

mla_view contiguous_cache::mla(int64_t layer) {
  slot& s = at(layer, formats::attn_kind::MLA);
  return {s.latent.data(), index_width_ ? s.index_keys.data() : nullptr, s.rows};
}

size_t contiguous_cache::bytes() const {
  size_t n = 0;
  for (const auto& s : slots_)
    n += (s.conv_q.size() + s.conv_k.size() + s.conv_v.size() + s.recurrent.size() + s.latent.size() +
          s.index_keys.size()) *
         sizeof(float);
  return n;
}

}  // namespace moxi::model
