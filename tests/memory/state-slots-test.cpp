// State slots: a reacquired slot starts from zero (a fresh sequence's state), copies are bit-exact and
// views of different layers and slots never overlap, also when the layers differ in size (a KDA state next
// to a sliding-window ring).
#include "moxi/memory/state-slots.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>

namespace moxi::memory {
namespace {

TEST(KdaStateSlots, AcquireZeroesCopyIsExactViewsAreDisjoint) {
  constexpr int64_t kConv = 6, kRec = 18;
  state_slots slots(3, {3 * kConv + kRec, 3 * kConv + kRec});
  const slot_id a = *slots.acquire(), b = *slots.acquire(), c = *slots.acquire();
  EXPECT_FALSE(slots.acquire());
  std::set<const float*> seen;
  for (slot_id s : {a, b, c})
    for (int64_t l = 0; l < 2; ++l) {
      const auto v = kda_view(slots.layer(s, l), kConv);
      for (float* p : {v.conv_q, v.conv_k, v.conv_v, v.recurrent}) EXPECT_TRUE(seen.insert(p).second);
      EXPECT_EQ(v.conv_k - v.conv_q, kConv);
      EXPECT_EQ(v.recurrent - v.conv_v, kConv);
      for (int64_t i = 0; i < kRec; ++i) v.recurrent[i] = float(s * 1000 + l * 100 + i) * 0.37f;
      for (int64_t i = 0; i < kConv; ++i) v.conv_q[i] = v.conv_k[i] = v.conv_v[i] = -float(i) / 3.0f;
    }
  slots.copy(a, b);
  EXPECT_EQ(std::memcmp(slots.data(a), slots.data(b), slots.slot_floats() * sizeof(float)), 0);
  state_slots other(1, {3 * kConv + kRec, 3 * kConv + kRec});
  const slot_id o = *other.acquire();
  other.copy_from(slots, c, o);
  EXPECT_EQ(std::memcmp(other.data(o), slots.data(c), slots.slot_floats() * sizeof(float)), 0);
  slots.release(b);
  const slot_id again = *slots.acquire();
  EXPECT_EQ(again, b);
  for (size_t i = 0; i < slots.slot_floats(); ++i) ASSERT_EQ(slots.data(again)[i], 0.0f);
}

TEST(StateSlots, LayersOfDifferentSizesTileTheSlot) {
  state_slots slots(2, {24, 40, 8});  // e.g. KDA, a ring, KDA
  EXPECT_EQ(slots.slot_floats(), 72u);
  const slot_id a = *slots.acquire(), b = *slots.acquire();
  EXPECT_EQ(slots.layer(a, 1) - slots.layer(a, 0), 24);
  EXPECT_EQ(slots.layer(a, 2) - slots.layer(a, 1), 40);
  EXPECT_EQ(slots.layer(b, 0) - slots.layer(a, 0), 72);
  std::fill_n(slots.layer(a, 1), 40, 2.5f);
  for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(*slots.layer(b, l), 0.0f);
  slots.copy(a, b);
  EXPECT_EQ(slots.layer(b, 1)[39], 2.5f);
  EXPECT_EQ(slots.layer(b, 2)[0], 0.0f);
}

}  // namespace
}  // namespace moxi::memory
