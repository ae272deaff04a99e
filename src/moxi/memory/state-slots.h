// state_slots: the cache manager of the STATE kinds (cache-spec.h): a fixed number of slots, each holding
// the constant-size state of every state layer of one sequence (a KDA layer's three short-conv states and
// fp32 recurrent state, in the layouts of kernels/ref/kda.h and model/cache.h; a sliding-window layer's
// ring of keys and values). The same type holds the prefix cache's snapshots. Acquire hands out a zeroed
// slot, because a fresh sequence starts from the zero state (vLLM zeroes slots without an initial state).
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
// A KDA layer's state floats split into its parts; conv_floats = (W-1) * P.
inline kda_state_view kda_view(float* p, int64_t conv_floats) {
  return {p, p + conv_floats, p + 2 * conv_floats, p + 3 * conv_floats};
}

class state_slots {
 public:
  // layer_floats[i]: floats of state layer i (0-based among the state layers) in every slot.
  state_slots(int32_t num_slots, std::vector<int64_t> layer_floats);

  int32_t num_slots() const { return int32_t(in_use_.size()); }
  int32_t num_free() const { return int32_t(free_.size()); }

  std::optional<slot_id> acquire();  // a zeroed slot, or nullopt when all are taken
  void release(slot_id s);
  void copy(slot_id src, slot_id dst);  // every layer's state, bit for bit
  // The same, from a slot of another pool of the same shape (sequence state <-> prefix-cache snapshot).
  void copy_from(const state_slots& other, slot_id src, slot_id dst);
  bool in_use(slot_id s) const { return in_use_.at(size_t(s)); }

  // State layer `layer` (0-based among the state layers) of slot s: layer_floats[layer] floats.
  float* layer(slot_id s, int64_t layer);
  // All floats of a slot, for comparisons in tests.
  const float* data(slot_id s) const { return data_.data() + size_t(s) * slot_floats_; }
  size_t slot_floats() const { return slot_floats_; }

 private:
  std::vector<int64_t> offsets_;  // layer i at [offsets_[i], offsets_[i+1]) of a slot
  size_t slot_floats_;
  std::vector<float> data_;  // f32 [num_slots, slot_floats]
  std::vector<bool> in_use_;
  std::vector<slot_id> free_;  // LIFO: a just-freed slot is warm in cache
};

}  // namespace moxi::memory
