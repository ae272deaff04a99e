// block_pool against a plain model (holder counts in a map, LRU order in a list) under random allocate /
// retain / release / cache operations, plus the LRU and cache-entry rules on their own.
#include "moxi/memory/block-pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <list>
#include <map>
#include <random>
#include <set>

namespace moxi::memory {
namespace {

std::vector<token_id> tokens_of(int seed, int n) {
  std::vector<token_id> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = seed * 1000 + i;
  return t;
}

TEST(BlockPool, RandomOperationsMatchAPlainModel) {
  for (uint32_t seed : {1u, 2u, 3u, 4u, 5u}) {
    constexpr int32_t kBlocks = 24, kBlockSize = 4;
    block_pool pool(kBlocks, kBlockSize);
    std::set<block_id> evicted;
    pool.set_evict_listener([&](block_id b) { evicted.insert(b); });
    // The model: holders per block, the free queue in LRU order, which blocks are cached under which hash.
    std::map<block_id, int> holders;
    std::list<block_id> free_q;
    for (block_id b = 0; b < kBlocks; ++b) free_q.push_back(b);
    std::map<block_id, uint64_t> cached;
    std::vector<block_id> held;  // one entry per holder
    std::mt19937 rng(seed);
    uint64_t next_hash = 1;
    for (int step = 0; step < 4000; ++step) {
      const int op = int(rng() % 4);
      if (op == 0) {  // allocate
        const int32_t n = int32_t(rng() % 5);
        evicted.clear();
        auto got = pool.allocate(n);
        if (n > int32_t(free_q.size())) {
          EXPECT_FALSE(got.has_value());
          continue;
        }
        ASSERT_TRUE(got.has_value());
        std::set<block_id> want_evicted;
        for (block_id b : *got) {
          ASSERT_FALSE(free_q.empty());
          EXPECT_EQ(b, free_q.front()) << "allocation must take the least recently freed block";
          free_q.pop_front();
          EXPECT_EQ(holders[b], 0);
          holders[b] = 1;
          held.push_back(b);
          if (cached.erase(b)) want_evicted.insert(b);
        }
        EXPECT_EQ(evicted, want_evicted) << "only unreferenced cached blocks are evicted, and all of them";
      } else if (op == 1 && !held.empty()) {  // release one holder
        const size_t i = rng() % held.size();
        const block_id b = held[i];
        held.erase(held.begin() + std::ptrdiff_t(i));
        pool.release(b);
        if (--holders[b] == 0) free_q.push_back(b);
      } else if (op == 2 && !held.empty()) {  // fork: one more holder of a held block
        const block_id b = held[rng() % held.size()];
        pool.retain(b);
        ++holders[b];
        held.push_back(b);
      } else if (op == 3) {  // cache a held block, or hit a cached free one
        if (rng() % 2 && !held.empty()) {
          const block_id b = held[rng() % held.size()];
          const uint64_t h = next_hash++;
          const bool fresh = !cached.count(b);
          EXPECT_EQ(pool.insert_cached(b, h, 0, tokens_of(int(h), kBlockSize)), fresh);
          if (fresh) cached[b] = h;
        } else if (!cached.empty()) {
          auto it = cached.begin();
          std::advance(it, std::ptrdiff_t(rng() % cached.size()));
          const auto [b, h] = *it;
          ASSERT_EQ(pool.lookup(h, 0, tokens_of(int(h), kBlockSize)), std::optional<block_id>(b));
          pool.retain(b);
          if (holders[b]++ == 0) free_q.remove(b);
          held.push_back(b);
        }
      }
      pool.check_invariants();
      ASSERT_EQ(pool.num_free(), int32_t(free_q.size()));
      ASSERT_EQ(pool.num_cached(), int32_t(cached.size()));
      ASSERT_EQ(pool.free_queue(), std::vector<block_id>(free_q.begin(), free_q.end()));
      for (const auto& [b, n] : holders) ASSERT_EQ(pool.ref_count(b), n);
    }
    for (block_id b : held) pool.release(b);
    EXPECT_EQ(pool.num_free(), kBlocks) << "every block back at the end";
    pool.check_invariants();
  }
}

TEST(BlockPool, AllocationIsAllOrNothing) {
  block_pool pool(3, 2);
  auto a = pool.allocate(2);
  ASSERT_TRUE(a);
  EXPECT_FALSE(pool.allocate(2));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_TRUE(pool.allocate(1));
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(BlockPool, LookupChecksParentAndTokensNotOnlyTheHash) {
  block_pool pool(2, 3);
  const block_id b = pool.allocate(1)->front();
  const std::vector<token_id> t = {1, 2, 3};
  ASSERT_TRUE(pool.insert_cached(b, 42, 7, t));
  EXPECT_EQ(pool.lookup(42, 7, t), std::optional<block_id>(b));
  EXPECT_FALSE(pool.lookup(42, 8, t)) << "same hash, other parent: a collision, not a hit";
  EXPECT_FALSE(pool.lookup(42, 7, std::vector<token_id>{1, 2, 4}));
  EXPECT_FALSE(pool.lookup(43, 7, t));
  // A second block with the same content is not cached twice; the first keeps the entry.
  const block_id c = pool.allocate(1)->front();
  EXPECT_FALSE(pool.insert_cached(c, 42, 7, t));
  EXPECT_FALSE(pool.is_cached(c));
}

TEST(BlockPool, CachedBlocksSurviveReleaseUntilReallocated) {
  block_pool pool(3, 1);
  int evictions = 0;
  pool.set_evict_listener([&](block_id) { ++evictions; });
  auto blocks = *pool.allocate(3);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(pool.insert_cached(blocks[size_t(i)], uint64_t(100 + i), 0, std::vector<token_id>{i}));
  pool.release(blocks[1]);  // freed first -> evicted first
  pool.release(blocks[0]);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_cached(), 3) << "release keeps the entries";
  const block_id got = pool.allocate(1)->front();
  EXPECT_EQ(got, blocks[1]);
  EXPECT_EQ(evictions, 1);
  EXPECT_FALSE(pool.lookup(101, 0, std::vector<token_id>{1}));
  EXPECT_TRUE(pool.lookup(100, 0, std::vector<token_id>{0}));
  EXPECT_TRUE(pool.lookup(102, 0, std::vector<token_id>{2})) << "a referenced cached block stays";
  EXPECT_FALSE(pool.allocate(2)) << "the referenced block is never taken";
  pool.check_invariants();
}

}  // namespace
}  // namespace moxi::memory
