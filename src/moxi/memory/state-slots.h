// kda_state_slots: a fixed number of slots, each holding the constant-size decode state of every KDA layer
// of one sequence (three short-conv states and the fp32 recurrent state; the layouts of kernels/ref/kda.h
// and model/cache.h). The same type holds the prefix cache's snapshots. Acquire hands out a zeroed slot,
// because a fresh sequence starts from the zero state (vLLM zeroes slots without an initial state).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace moxi::memory {

using slot_id = int32_t;

// One KDA layer's state inside a slot.
struct kda_state_view {
  float* conv_q = nullptr;     // f32 [W-1, P], oldest input first
  float* conv_k = nullptr;     // f32 [W-1, P]
  float* conv_v = nullptr;     // f32 [W-1, P]
  float* recurrent = nullptr;  // f32 [H, K, V], K-major
};

class kda_state_slots {
 public:
  // conv_floats = (W-1) * P, recurrent_floats = H * K * V, per layer.
  kda_state_slots(int32_t num_slots, int64_t num_kda_layers, int64_t conv_floats, int64_t recurrent_floats);

  int32_t num_slots() const { return int32_t(in_use_.size()); }
  int32_t num_free() const { return int32_t(free_.size()); }

  std::optional<slot_id> acquire();  // a zeroed slot, or nullopt when all are taken
  void release(slot_id s);
  void copy(slot_id src, slot_id dst);  // every layer's state, bit for bit
  // The same, from a slot of another pool of the same shape (sequence state <-> prefix-cache snapshot).
  void copy_from(const kda_state_slots& other, slot_id src, slot_id dst);
  bool in_use(slot_id s) const { return in_use_.at(size_t(s)); }

  // kda_layer is 0-based among the KDA layers.
  kda_state_view view(slot_id s, int64_t kda_layer);
  // All floats of a slot, for comparisons in tests.
  const float* data(slot_id s) const { return data_.data() + size_t(s) * slot_floats_; }
  size_t slot_floats() const { return slot_floats_; }

 private:
  int64_t num_layers_, conv_floats_, recurrent_floats_;
  size_t slot_floats_;
  std::vector<float> data_;  // f32 [num_slots, num_kda_layers, 3 * conv + recurrent]
  std::vector<bool> in_use_;
  std::vector<slot_id> free_;  // LIFO: a just-freed slot is warm in cache
};

}  // namespace moxi::memory
