// The contiguous per-sequence cache: zero-initialized states (a fresh sequence) of the size each slot's
// attention kind asks for, MLA rows grown on demand. Slot kinds follow the architecture layout; the MTP
// slots follow the same rule as the manifest.
#include "moxi/model/cache.h"

#include <algorithm>
#include <string>

#include "moxi/base/error.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/model/arch/registry.h"
#include "moxi/model/layers/attention.h"

namespace moxi::model {

contiguous_cache::contiguous_cache(const formats::model_config& c, const std::vector<bool>& owned) {
  const auto layout = arch::find_architecture(c).layout(c);
  if (c.mla) latent_width_ = c.mla->kv_lora_rank + c.mla->qk_rope_head_dim;
  if (c.dsa) index_width_ = kernels::ref::index_key_bytes(c.dsa->index_head_dim);
  if (c.kda) kda_conv_floats_ = (c.kda->conv_kernel - 1) * c.kda->proj_dim();
  MOXI_ASSERT(owned.empty() || owned.size() == layout.layers.size() + layout.mtp_layers.size());
  auto add = [&](const arch::layer_layout& l, bool mtp) {
    slot s;
    s.kind = l.attn;
    s.mtp = mtp;
    s.owned = owned.empty() || owned[slots_.size()];
    if (s.owned) s.state.assign(size_t(attention_state_floats(c, l.attn)), 0.0f);
    slots_.push_back(std::move(s));
  };
  for (const auto& l : layout.layers) add(l, false);
  for (const auto& l : layout.mtp_layers) add(l, true);
}

contiguous_cache::slot& contiguous_cache::at(int64_t layer) {
  MOXI_ASSERT(layer >= 0 && size_t(layer) < slots_.size());
  MOXI_ASSERT(slots_[size_t(layer)].owned, "cache slot of another pipeline stage's layer");
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

void contiguous_cache::reserve(int64_t tokens) {
  for (auto& s : slots_) {
    if (s.kind != formats::attn_kind::MLA || !s.owned) continue;
    s.latent.reserve(size_t(tokens * latent_width_));
    if (index_width_) s.index_keys.reserve(size_t(tokens * index_width_));
  }
}

void contiguous_cache::begin_trace() {
  tracing_ = true;
  mark_length_ = length_;
  mark_mtp_length_ = mtp_length_;
  for (auto& s : slots_) {
    s.marked = s.state;
    s.trace.clear();
  }
}

void contiguous_cache::end_trace() {
  tracing_ = false;
  for (auto& s : slots_) {
    s.marked.clear();
    s.marked.shrink_to_fit();
    s.trace.clear();
  }
}

float* contiguous_cache::state_trace(int64_t layer, int64_t T) {
  slot& s = at(layer);
  if (!tracing_ || s.state.empty()) return nullptr;
  const size_t old = s.trace.size();
  s.trace.resize(old + size_t(T) * s.state.size());
  return s.trace.data() + old;
}

void contiguous_cache::rewind(int64_t length, int64_t mtp_length) {
  if (!tracing_) throw error("cache: rewind without a trace (begin_trace)");
  if (length < mark_length_ || length > length_ || mtp_length < mark_mtp_length_ || mtp_length > mtp_length_)
    throw error("cache: rewind to " + std::to_string(length) + "/" + std::to_string(mtp_length) +
                " tokens, outside the traced " + std::to_string(mark_length_) + ".." + std::to_string(length_) +
                " / " + std::to_string(mark_mtp_length_) + ".." + std::to_string(mtp_length_));
  for (auto& s : slots_) {
    if (!s.owned) continue;
    const int64_t keep = s.mtp ? mtp_length - mark_mtp_length_ : length - mark_length_;
    if (!s.state.empty()) {
      const size_t n = s.state.size();
      // A layer that ran fewer tokens than its slot's length (none today) would have no record to go to.
      MOXI_ASSERT(s.trace.size() >= size_t(keep) * n, "state trace shorter than the tokens run");
      const float* from = keep == 0 ? s.marked.data() : s.trace.data() + size_t(keep - 1) * n;
      std::copy(from, from + n, s.state.begin());
      s.trace.resize(size_t(keep) * n);
    } else {
      const int64_t rows = s.mtp ? mtp_length : length;
      MOXI_ASSERT(rows <= s.rows, "MLA slot has fewer rows than the cache length");
      s.rows = rows;
      s.latent.resize(size_t(rows * latent_width_));
      if (index_width_) s.index_keys.resize(size_t(rows * index_width_));
    }
  }
  length_ = length;
  mtp_length_ = mtp_length;
}

mla_view contiguous_cache::mla(int64_t layer) {
  slot& s = at(layer);
  MOXI_ASSERT(s.kind == formats::attn_kind::MLA, "cache slot of the wrong attention kind");
  return {s.latent.data(), index_width_ ? s.index_keys.data() : nullptr, s.rows};
}

}  // namespace moxi::model
