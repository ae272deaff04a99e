// block_pool: fixed-size blocks of block_size token positions, reference counted, with one free queue
// that is also the prefix cache's LRU list (vLLM v1 BlockPool / FreeKVCacheBlockQueue): a block whose last
// holder lets go goes to the tail of the queue and keeps its cache entry; allocation takes from the head
// and evicts the entry of a cached block it takes. So unreferenced cached blocks count as free, are reused
// least-recently-freed first, and a referenced block is never evicted.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "moxi/formats/tokenizer.h"

namespace moxi::memory {

using block_id = int32_t;

class block_pool {
 public:
  block_pool(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return int32_t(ref_.size()); }
  int32_t block_size() const { return block_size_; }
  // Blocks with no holder: never used, freed, or cached but unreferenced (reclaimable by eviction).
  int32_t num_free() const { return num_free_; }
  // Blocks that hold a prefix-cache entry, referenced or not.
  int32_t num_cached() const { return int32_t(by_hash_.size()); }
  int32_t ref_count(block_id b) const { return ref_.at(size_t(b)); }

  // n blocks from the head of the free queue, each with one holder; all or nothing. A block taken with a
  // cache entry loses it first (the evict listener hears of it).
  std::optional<std::vector<block_id>> allocate(int32_t n);
  // One more holder (a prefix hit or a fork). A cached block at 0 holders leaves the free queue.
  void retain(block_id b);
  // One holder fewer; at 0 the block goes to the tail of the free queue, keeping any cache entry.
  void release(block_id b);

  // Registers a full block under its chain hash. False (and no change) when that hash is already cached by
  // another block (two sequences computed the same block; the first stays, as in vLLM) or b is cached.
  bool insert_cached(block_id b, uint64_t hash, uint64_t parent, std::span<const token_id> tokens);
  // The cached block with this hash whose parent hash and tokens also match (a 64-bit hash collision must
  // never hand out another prefix's latents), or nullopt.
  std::optional<block_id> lookup(uint64_t hash, uint64_t parent, std::span<const token_id> tokens) const;
  bool is_cached(block_id b) const { return entry_.at(size_t(b)).cached; }
  // Called with a block whose cache entry is dropped by eviction (the hybrid memory drops its snapshot).
  void set_evict_listener(std::function<void(block_id)> f) { on_evict_ = std::move(f); }

  // The free queue, head (next to be reused) first; for tests and invariant checks.
  std::vector<block_id> free_queue() const;
  // Aborts when the free queue, the holder counts and the cache map disagree.
  void check_invariants() const;

 private:
  struct cache_entry {
    bool cached = false;
    uint64_t hash = 0, parent = 0;
    std::vector<token_id> tokens;
  };
  void unlink(block_id b);
  void push_tail(block_id b);

  int32_t block_size_;
  std::vector<int32_t> ref_;
  // Intrusive doubly linked free queue; index num_blocks is the sentinel.
  std::vector<block_id> prev_, next_;
  std::vector<bool> in_queue_;
  int32_t num_free_ = 0;
  std::vector<cache_entry> entry_;
  std::unordered_map<uint64_t, block_id> by_hash_;
  std::function<void(block_id)> on_evict_;
};

}  // namespace moxi::memory
