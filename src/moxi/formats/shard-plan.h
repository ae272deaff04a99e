// Splitting an ordered list of tensors into N checkpoint shards of balanced size without reordering
// (so every shard holds a contiguous run of tensors, e.g. whole layers). Used by the checkpoint writer
// and by `moxi plan`, so the planned layout is the one that gets written.
#pragma once

#include <cstdint>
#include <vector>

namespace moxi::formats {

// Returns, for each tensor, its shard index in [0, num_shards'), where num_shards' = min(num_shards,
// sizes.size()) (at least 1). Every shard is non-empty; cuts are placed where the running byte total
// crosses k * total / num_shards', so shard sizes differ from the mean by at most the largest tensor.
std::vector<int> plan_shards(const std::vector<uint64_t>& sizes, int num_shards);

}  // namespace moxi::formats
