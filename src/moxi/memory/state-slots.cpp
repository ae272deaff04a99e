// kda_state_slots: slot bookkeeping and whole-slot copies.
#include "moxi/memory/state-slots.h"

#include <algorithm>
#include <cstring>

#include "moxi/base/error.h"

namespace moxi::memory {

kda_state_slots::kda_state_slots(int32_t num_slots, int64_t num_kda_layers, int64_t conv_floats,
                                 int64_t recurrent_floats)
    : num_layers_(num_kda_layers),
      conv_floats_(conv_floats),
      recurrent_floats_(recurrent_floats),
      slot_floats_(size_t(num_kda_layers * (3 * conv_floats + recurrent_floats))),
      data_(size_t(num_slots) * slot_floats_, 0.0f),
      in_use_(size_t(num_slots), false) {
  MOXI_ASSERT(num_slots >= 0);
  for (slot_id s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

std::optional<slot_id> kda_state_slots::acquire() {
  if (free_.empty()) return std::nullopt;
  const slot_id s = free_.back();
  free_.pop_back();
  in_use_[size_t(s)] = true;
  std::fill_n(data_.begin() + std::ptrdiff_t(size_t(s) * slot_floats_), slot_floats_, 0.0f);
  return s;
}

void kda_state_slots::release(slot_id s) {
  MOXI_ASSERT(in_use_.at(size_t(s)), "release of a free KDA state slot");
  in_use_[size_t(s)] = false;
  free_.push_back(s);
}

void kda_state_slots::copy(slot_id src, slot_id dst) {
  MOXI_ASSERT(in_use_.at(size_t(src)) && in_use_.at(size_t(dst)));
  if (src == dst) return;
  std::memcpy(data_.data() + size_t(dst) * slot_floats_, data_.data() + size_t(src) * slot_floats_,
              slot_floats_ * sizeof(float));
}

void kda_state_slots::copy_from(const kda_state_slots& other, slot_id src, slot_id dst) {
  MOXI_ASSERT(other.slot_floats_ == slot_floats_ && other.in_use(src) && in_use_.at(size_t(dst)));
  std::memcpy(data_.data() + size_t(dst) * slot_floats_, other.data(src), slot_floats_ * sizeof(float));
}

kda_state_view kda_state_slots::view(slot_id s, int64_t kda_layer) {
  MOXI_ASSERT(in_use_.at(size_t(s)) && kda_layer >= 0 && kda_layer < num_layers_);
  float* p =
      data_.data() + size_t(s) * slot_floats_ + size_t(kda_layer * (3 * conv_floats_ + recurrent_floats_));
  return {p, p + conv_floats_, p + 2 * conv_floats_, p + 3 * conv_floats_};
}

}  // namespace moxi::memory
