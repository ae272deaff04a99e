// state_slots: slot bookkeeping and whole-slot copies.
#include "moxi/memory/state-slots.h"

#include <algorithm>
#include <cstring>

#include "moxi/base/error.h"

namespace moxi::memory {

namespace {

std::vector<int64_t> offsets_of(const std::vector<int64_t>& floats) {
  std::vector<int64_t> off{0};
  for (int64_t f : floats) {
    MOXI_ASSERT(f >= 0);
    off.push_back(off.back() + f);
  }
  return off;
}

}  // namespace

state_slots::state_slots(int32_t num_slots, std::vector<int64_t> layer_floats)
    : offsets_(offsets_of(layer_floats)),
      slot_floats_(size_t(offsets_.back())),
      data_(size_t(num_slots) * slot_floats_, 0.0f),
      in_use_(size_t(num_slots), false) {
  MOXI_ASSERT(num_slots >= 0);
  for (slot_id s = num_slots - 1; s >= 0; --s) free_.push_back(s);
}

std::optional<slot_id> state_slots::acquire() {
  if (free_.empty()) return std::nullopt;
  const slot_id s = free_.back();
  free_.pop_back();
  in_use_[size_t(s)] = true;
  std::fill_n(data_.begin() + std::ptrdiff_t(size_t(s) * slot_floats_), slot_floats_, 0.0f);
  return s;
}

void state_slots::release(slot_id s) {
  MOXI_ASSERT(in_use_.at(size_t(s)), "release of a free state slot");
  in_use_[size_t(s)] = false;
  free_.push_back(s);
}

void state_slots::copy(slot_id src, slot_id dst) {
  MOXI_ASSERT(in_use_.at(size_t(src)) && in_use_.at(size_t(dst)));
  if (src == dst) return;
  std::memcpy(data_.data() + size_t(dst) * slot_floats_, data_.data() + size_t(src) * slot_floats_,
              slot_floats_ * sizeof(float));
}

void state_slots::copy_from(const state_slots& other, slot_id src, slot_id dst) {
  MOXI_ASSERT(other.offsets_ == offsets_ && other.in_use(src) && in_use_.at(size_t(dst)));
  std::memcpy(data_.data() + size_t(dst) * slot_floats_, other.data(src), slot_floats_ * sizeof(float));
}

float* state_slots::layer(slot_id s, int64_t layer) {
  MOXI_ASSERT(in_use_.at(size_t(s)) && layer >= 0 && size_t(layer) + 1 < offsets_.size());
  return data_.data() + size_t(s) * slot_floats_ + size_t(offsets_[size_t(layer)]);
}

}  // namespace moxi::memory
