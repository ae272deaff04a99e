// plan_shards: the contiguous balanced split used by the checkpoint writer and `moxi plan`, checked against
// its documented invariants (shard-plan.h) by an independent brute-force checker, on hand-made edge cases
// and on random size lists with fixed seeds.
#include "moxi/formats/shard-plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace moxi::formats {
namespace {

// Checks every invariant of plan_shards' contract for one input; returns "" or the first violation.
std::string check_invariants(const std::vector<uint64_t>& sizes, int requested,
                             const std::vector<int>& shard) {
  const size_t n = sizes.size();
  if (shard.size() != n) return "one shard index per tensor expected";
  if (n == 0) return "";
  const int expected = int(std::clamp<int64_t>(requested, 1, int64_t(n)));
  if (shard.front() != 0) return "first tensor not in shard 0";
  if (shard.back() != expected - 1) {
    return "last tensor in shard " + std::to_string(shard.back()) + ", expected " +
           std::to_string(expected - 1);
  }
  for (size_t i = 1; i < n; ++i) {
    if (shard[i] < shard[i - 1]) return "indices decrease at tensor " + std::to_string(i);
    if (shard[i] > shard[i - 1] + 1) return "shard skipped at tensor " + std::to_string(i);
  }
  // Brute force: count and bytes per shard.
  std::vector<int64_t> count(size_t(expected), 0);
  std::vector<long double> bytes(size_t(expected), 0);
  long double total = 0;
  uint64_t largest = 0;
  for (size_t i = 0; i < n; ++i) {
    if (shard[i] < 0 || shard[i] >= expected) return "index out of range at tensor " + std::to_string(i);
    count[size_t(shard[i])]++;
    bytes[size_t(shard[i])] += static_cast<long double>(sizes[i]);
    total += static_cast<long double>(sizes[i]);
    largest = std::max(largest, sizes[i]);
  }
  for (int s = 0; s < expected; ++s)
    if (count[size_t(s)] == 0) return "shard " + std::to_string(s) + " is empty";
  const long double mean = total / expected;
  for (int s = 0; s < expected; ++s) {
    const long double dev = bytes[size_t(s)] > mean ? bytes[size_t(s)] - mean : mean - bytes[size_t(s)];
    if (dev > static_cast<long double>(largest)) {
      return "shard " + std::to_string(s) + " deviates from the mean by more than the largest tensor (" +
             std::to_string(double(dev)) + " > " + std::to_string(largest) + ")";
    }
  }
  return "";
}

TEST(ShardPlanTest, EqualSizesSplitEvenly) {
  const std::vector<uint64_t> sizes(12, 100);
  const auto shard = plan_shards(sizes, 4);
  EXPECT_EQ(shard, (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}));
  EXPECT_EQ(check_invariants(sizes, 4, shard), "");
}

TEST(ShardPlanTest, EmptyInputGivesEmptyPlan) {
  EXPECT_TRUE(plan_shards({}, 8).empty());
}

TEST(ShardPlanTest, SingleTensorIsOneShard) {
  for (int requested : {1, 2, 96}) {
    const auto shard = plan_shards({12345}, requested);
    EXPECT_EQ(shard, std::vector<int>{0}) << requested;
  }
}

TEST(ShardPlanTest, MoreShardsThanTensorsClampsToOnePerTensor) {
  const std::vector<uint64_t> sizes{5, 1000, 7, 3, 9000};
  const auto shard = plan_shards(sizes, 96);
  EXPECT_EQ(shard, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(check_invariants(sizes, 96, shard), "");
}

TEST(ShardPlanTest, NonPositiveShardCountMeansOne) {
  const std::vector<uint64_t> sizes{1, 2, 3};
  EXPECT_EQ(plan_shards(sizes, 0), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(plan_shards(sizes, -5), (std::vector<int>{0, 0, 0}));
}

TEST(ShardPlanTest, AllZeroSizesSplitByCount) {
  const std::vector<uint64_t> sizes(10, 0);
  const auto shard = plan_shards(sizes, 5);
  EXPECT_EQ(check_invariants(sizes, 5, shard), "");
  for (int s = 0; s < 5; ++s) EXPECT_EQ(std::count(shard.begin(), shard.end(), s), 2) << s;
}

TEST(ShardPlanTest, ZeroSizeTensorsMixedIn) {
  const std::vector<uint64_t> sizes{0, 0, 100, 0, 100, 0, 0, 100, 0, 100, 0};
  for (int requested = 1; requested <= int(sizes.size()) + 2; ++requested)
    EXPECT_EQ(check_invariants(sizes, requested, plan_shards(sizes, requested)), "") << requested;
}

TEST(ShardPlanTest, HugeTensorsAmongTinyOnesKeepEveryShardNonEmpty) {
  // Two tensors each larger than a shard's share: the plan still fills every shard.
  const std::vector<uint64_t> sizes{1, 1, 1, 1, 1, 1, 1000, 1000};
  const auto shard = plan_shards(sizes, 4);
  EXPECT_EQ(check_invariants(sizes, 4, shard), "");
  EXPECT_NE(shard[6], shard[7]);
}

TEST(ShardPlanTest, LargestTensorFirstAndLast) {
  std::vector<uint64_t> sizes(50, 3);
  sizes.front() = 1'000'000;
  sizes.back() = 1'000'000;
  for (int requested : {2, 3, 7, 49, 50})
    EXPECT_EQ(check_invariants(sizes, requested, plan_shards(sizes, requested)), "") << requested;
}

TEST(ShardPlanTest, MultiTerabyteTotalsDoNotOverflow) {
  // ~1.5 TB in 40 GB pieces with 96 shards: a 64-bit product of total x shards would overflow.
  const std::vector<uint64_t> sizes(40, 40ull << 30);
  const auto shard = plan_shards(sizes, 96);
  EXPECT_EQ(check_invariants(sizes, 96, shard), "");
  std::vector<uint64_t> big(1000, (1ull << 62) / 1000);
  EXPECT_EQ(check_invariants(big, 96, plan_shards(big, 96)), "");
}

TEST(ShardPlanTest, RandomSizesSatisfyInvariants) {
  int cases = 0;
  for (uint32_t seed = 1; seed <= 400; ++seed) {
    std::mt19937_64 rng(seed);
    const size_t n = 1 + rng() % 300;
    std::vector<uint64_t> sizes(n);
    const int shape = int(seed % 4);
    for (auto& s : sizes) {
      switch (shape) {
        case 0:
          s = rng() % 1000;
          break;  // similar sizes
        case 1:
          s = (rng() % 10 == 0) ? rng() % 10'000'000 : rng() % 100;
          break;  // a few huge ones
        case 2:
          s = (rng() % 3 == 0) ? 0 : 1 + rng() % 50;
          break;  // many zero-size
        default:
          s = uint64_t(1) << (rng() % 40);
          break;  // sizes over 12 decades
      }
    }
    for (int requested : {1, 2, 3, 8, 17, 96, int(n), int(n) + 1, 1000}) {
      const auto shard = plan_shards(sizes, requested);
      ASSERT_EQ(check_invariants(sizes, requested, shard), "")
          << "seed " << seed << " n " << n << " shards " << requested;
      ++cases;
    }
  }
  EXPECT_EQ(cases, 400 * 9);
}

// The checker itself must catch violations, otherwise the property test proves nothing.
TEST(ShardPlanTest, CheckerRejectsBrokenPlans) {
  const std::vector<uint64_t> sizes{10, 10, 10, 10};
  EXPECT_EQ(check_invariants(sizes, 2, {0, 0, 1, 1}), "");
  EXPECT_NE(check_invariants(sizes, 2, {0, 1, 0, 1}), "");  // decreasing
  EXPECT_NE(check_invariants(sizes, 3, {0, 0, 2, 2}), "");  // skipped shard
  EXPECT_NE(check_invariants(sizes, 2, {0, 0, 0, 0}), "");  // wrong shard count
  // Ten tensors of 10 bytes, 9 + 1: shard 0 is 40 bytes above the mean of 50, more than the largest (10).
  EXPECT_NE(check_invariants(std::vector<uint64_t>(10, 10), 2, {0, 0, 0, 0, 0, 0, 0, 0, 0, 1}), "");
}

}  // namespace
}  // namespace moxi::formats
