// Contiguous balanced sharding (see shard-plan.h).
#include "moxi/formats/shard-plan.h"

#include <algorithm>

#include "moxi/base/error.h"

namespace moxi::formats {

std::vector<int> plan_shards(const std::vector<uint64_t>& sizes, int num_shards) {
  const size_t n = sizes.size();
  std::vector<int> shard(n, 0);
  if (n == 0) return shard;
  const uint64_t shards = uint64_t(std::clamp<int64_t>(num_shards, 1, int64_t(n)));
  long double total = 0;  // byte totals of multi-TB checkpoints times the shard count overflow 64 bits
  for (uint64_t s : sizes) total += static_cast<long double>(s);
  // Tensor i goes to the shard holding its byte midpoint, then the sequence is repaired so that each
  // shard is non-empty and indices never decrease.
  long double before = 0;
  for (size_t i = 0; i < n; ++i) {
    const long double mid = before + static_cast<long double>(sizes[i]) / 2;
    uint64_t s =
        total > 0 ? uint64_t(mid / total * static_cast<long double>(shards)) : uint64_t(i * shards / n);
    shard[i] = int(std::min<uint64_t>(s, shards - 1));
    before += static_cast<long double>(sizes[i]);
  }
  // Force non-decreasing with room for the remaining shards: shard[i] in [i - (n - shards), i] bounds.
  for (size_t i = 0; i < n; ++i) {
    const int64_t lo = std::max<int64_t>(i == 0 ? 0 : shard[i - 1], int64_t(i) - int64_t(n - shards));
    const int64_t hi = std::min<int64_t>(int64_t(i), int64_t(shards) - 1);
    const int64_t prev = i == 0 ? -1 : shard[i - 1];
    int64_t s = std::clamp<int64_t>(shard[i], lo, hi);
    if (s > prev + 1) s = prev + 1;  // never skip a shard
    shard[i] = int(s);
  }
  MOXI_ASSERT(shard.back() == int(shards) - 1);
  return shard;
}

}  // namespace moxi::formats
