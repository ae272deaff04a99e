// The contiguous per-sequence cache: zero-initialized states (a fresh sequence) of the size each slot's
// attention kind asks for, MLA rows grown on demand. Slot kinds follow the architecture layout; the MTP
// slots follow the same rule as the manifest.
#include "moxi/model/cache.h"

#include "moxi/base/error.h"
#include "moxi/model/arch/registry.h"
#include "moxi/model/layers/attention.h"

namespace moxi::model {

contiguous_cache::contiguous_cache(const formats::model_config& c) {
  const auto layout = arch::find_architecture(c).layout(c);
  if (c.mla) latent_width_ = c.mla->kv_lora_rank + c.mla->qk_rope_head_dim;
  if (c.dsa) index_width_ = c.dsa->index_head_dim;
  if (c.kda) kda_conv_floats_ = (c.kda->conv_kernel - 1) * c.kda->proj_dim();
  auto add = [&](const arch::layer_layout& l) {
    slot s;
    s.kind = l.attn;
    s.state.assign(size_t(attention_state_floats(c, l.attn)), 0.0f);
    slots_.push_back(std::move(s));
  };
  for (const auto& l : layout.layers) add(l);
  for (const auto& l : layout.mtp_layers) add(l);
}

contiguous_cache::slot& contiguous_cache::at(int64_t layer) {
  MOXI_ASSERT(layer >= 0 && size_t(layer) < slots_.size());
  return slots_[size_t(layer)];
}

float* contiguous_cache::state(int64_t layer) {
  slot& s = at(layer);
  MOXI_ASSERT(!s.state.empty(), "state access to a cache slot that keeps rows, not a state");
  return s.state.data();
}

kda_state_ref contiguous_cache::kda(int64_t layer) {
  MOXI_ASSERT(at(layer).kind == formats::attn_kind::KDA, "cache slot of the wrong attention kind");
  float* p = state(layer);
  const int64_t n = kda_conv_floats_;
  return {p, p + n, p + 2 * n, p + 3 * n};
}

mla_append_ref contiguous_cache::mla_append(int64_t layer, int64_t T) {
  slot& s = at(layer);
  MOXI_ASSERT(s.kind == formats::attn_kind::MLA, "cache slot of the wrong attention kind");
  const int64_t old = s.rows;
  s.rows += T;
  s.latent.resize(size_t(s.rows * latent_width_));
  if (index_width_) s.index_keys.resize(size_t(s.rows * index_width_));
  return {s.latent.data() + old * latent_width_,
          index_width_ ? s.index_keys.data() + old * index_width_ : nullptr};
}

mla_view contiguous_cache::mla(int64_t layer) {
  slot& s = at(layer);
  MOXI_ASSERT(s.kind == formats::attn_kind::MLA, "cache slot of the wrong attention kind");
  return {s.latent.data(), index_width_ ? s.index_keys.data() : nullptr, s.rows};
}

}  // namespace moxi::model
