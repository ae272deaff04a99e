// block_pool: O(1) allocate/retain/release over an intrusive free queue (vLLM v1 block_pool.py).
#include "moxi/memory/block-pool.h"

#include <algorithm>

#include "moxi/base/error.h"

namespace moxi::memory {

block_pool::block_pool(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size),
      ref_(size_t(num_blocks), 0),
      prev_(size_t(num_blocks) + 1),
      next_(size_t(num_blocks) + 1),
      in_queue_(size_t(num_blocks), false),
      entry_(size_t(num_blocks)) {
  MOXI_ASSERT(num_blocks >= 0 && block_size > 0);
  const block_id sentinel = num_blocks;
  prev_[size_t(sentinel)] = next_[size_t(sentinel)] = sentinel;
  for (block_id b = 0; b < num_blocks; ++b) push_tail(b);
}

void block_pool::unlink(block_id b) {
  MOXI_ASSERT(in_queue_[size_t(b)]);
  next_[size_t(prev_[size_t(b)])] = next_[size_t(b)];
  prev_[size_t(next_[size_t(b)])] = prev_[size_t(b)];
  in_queue_[size_t(b)] = false;
  --num_free_;
}

void block_pool::push_tail(block_id b) {
  MOXI_ASSERT(!in_queue_[size_t(b)]);
  const block_id sentinel = num_blocks();
  const block_id last = prev_[size_t(sentinel)];
  prev_[size_t(b)] = last;
  next_[size_t(b)] = sentinel;
  next_[size_t(last)] = b;
  prev_[size_t(sentinel)] = b;
  in_queue_[size_t(b)] = true;
  ++num_free_;
}

std::optional<std::vector<block_id>> block_pool::allocate(int32_t n) {
  MOXI_ASSERT(n >= 0);
  if (n > num_free_) return std::nullopt;
  std::vector<block_id> out;
  out.reserve(size_t(n));
  const block_id sentinel = num_blocks();
  for (int32_t i = 0; i < n; ++i) {
    const block_id b = next_[size_t(sentinel)];
    unlink(b);
    cache_entry& e = entry_[size_t(b)];
    if (e.cached) {
      by_hash_.erase(e.hash);
      e = cache_entry{};
      if (on_evict_) on_evict_(b);
    }
    ref_[size_t(b)] = 1;
    out.push_back(b);
  }
  return out;
}

void block_pool::retain(block_id b) {
  if (ref_.at(size_t(b))++ == 0) {
    // Only a cached block can be wanted again once unreferenced; anything else is a stale id.
    MOXI_ASSERT(entry_[size_t(b)].cached, "retain of a free block that holds no cache entry");
    unlink(b);
  }
}

void block_pool::release(block_id b) {
  MOXI_ASSERT(ref_.at(size_t(b)) > 0, "release of a block with no holder");
  if (--ref_[size_t(b)] == 0) push_tail(b);
}

bool block_pool::insert_cached(block_id b, uint64_t hash, uint64_t parent, std::span<const token_id> tokens) {
  MOXI_ASSERT(ref_.at(size_t(b)) > 0, "only a held, just-computed block is inserted into the cache");
  MOXI_ASSERT(int32_t(tokens.size()) == block_size_);
  cache_entry& e = entry_[size_t(b)];
  if (e.cached || by_hash_.count(hash)) return false;
  e.cached = true;
  e.hash = hash;
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  by_hash_.emplace(hash, b);
  return true;
}

std::optional<block_id> block_pool::lookup(uint64_t hash, uint64_t parent,
                                           std::span<const token_id> tokens) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  const cache_entry& e = entry_[size_t(it->second)];
  if (e.parent != parent || !std::equal(tokens.begin(), tokens.end(), e.tokens.begin(), e.tokens.end()))
    return std::nullopt;
  return it->second;
}

std::vector<block_id> block_pool::free_queue() const {
  std::vector<block_id> out;
  const block_id sentinel = num_blocks();
  for (block_id b = next_[size_t(sentinel)]; b != sentinel; b = next_[size_t(b)]) out.push_back(b);
  return out;
}

void block_pool::check_invariants() const {
  const auto q = free_queue();
  MOXI_ASSERT(int32_t(q.size()) == num_free_, "free queue length != free count");
  std::vector<bool> seen(ref_.size(), false);
  for (block_id b : q) {
    MOXI_ASSERT(!seen[size_t(b)], "block twice in the free queue");
    seen[size_t(b)] = true;
  }
  for (size_t b = 0; b < ref_.size(); ++b) {
    MOXI_ASSERT(ref_[b] >= 0);
    MOXI_ASSERT((ref_[b] == 0) == seen[b], "a block is free iff it has no holder");
    MOXI_ASSERT(in_queue_[b] == seen[b]);
    if (entry_[b].cached) {
      auto it = by_hash_.find(entry_[b].hash);
      MOXI_ASSERT(it != by_hash_.end() && it->second == block_id(b), "cache map out of sync");
    }
  }
  for (const auto& [h, b] : by_hash_) MOXI_ASSERT(entry_[size_t(b)].cached && entry_[size_t(b)].hash == h);
}

}  // namespace moxi::memory
