// The DSA indexer's scan split over tensor-parallel ranks by key position (model::indexer_topk_split)
// against the reference scores and top-k over the whole row (kernels::ref::indexer_scores/indexer_topk):
// the rows must be equal, index for index, for every rank count, with ties that straddle the ranks' shares,
// NaN scores and fewer visible keys than k.
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "moxi/kernels/ref/dsa.h"
#include "moxi/model/layers/mla.h"

namespace {

using moxi::model::process_group;

// n threads as the ranks of one group: all_gather_v through shared memory and a barrier. The split uses
// nothing else.
class thread_group final : public process_group {
 public:
  struct shared {
    explicit shared(int n) : size(n), sync(n), parts(size_t(n)) {}
    int size;
    std::barrier<> sync;
    std::vector<std::vector<float>> parts;
  };
  thread_group(shared& s, int rank) : s_(s), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return s_.size; }
  void all_gather_v(const float* send, std::span<const int64_t> counts, float* recv) const override {
    s_.parts[size_t(rank_)].assign(send, send + counts[size_t(rank_)]);
    s_.sync.arrive_and_wait();
    for (int r = 0; r < s_.size; ++r) {
      EXPECT_EQ(int64_t(s_.parts[size_t(r)].size()), counts[size_t(r)]);
      recv = std::copy(s_.parts[size_t(r)].begin(), s_.parts[size_t(r)].end(), recv);
    }
    s_.sync.arrive_and_wait();  // nobody overwrites a part before every rank has read it
  }
  void all_reduce_sum(float*, int64_t) const override { fail(); }
  void all_to_all(const int64_t*, int64_t*) const override { fail(); }
  void all_to_all_v(const void*, std::span<const int64_t>, void*, std::span<const int64_t>) const override { fail(); }
  void broadcast(void*, int64_t, int) const override { fail(); }
  void send(const void*, int64_t, int) const override { fail(); }
  void recv(void*, int64_t, int) const override { fail(); }

 private:
  [[noreturn]] static void fail() { throw std::logic_error("the indexer split uses all_gather_v only"); }
  shared& s_;
  int rank_;
};

struct indexer_case {
  int64_t T, S, HI, D, k;
  std::vector<float> q, w;
  std::vector<uint8_t> keys;  // FP8 key rows (kernels/ref/dsa.h)
};

// Random queries and keys; `period` > 0 repeats the keys with that period, so equal scores lie far apart
// (in different ranks' shares); `nan_at` >= 0 puts a NaN into that key.
indexer_case make_case(int64_t T, int64_t S, int64_t k, int64_t period, int64_t nan_at, uint32_t seed) {
  indexer_case c{T, S, 3, 8, k, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  c.q.resize(size_t(T * c.HI * c.D));
  std::vector<float> keys(size_t(S * c.D));
  c.w.resize(size_t(T * c.HI));
  for (float& v : c.q) v = nd(rng);
  for (float& v : c.w) v = nd(rng);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t d = 0; d < c.D; ++d)
      keys[size_t(s * c.D + d)] = period > 0 && s >= period ? keys[size_t((s % period) * c.D + d)] : nd(rng);
  if (nan_at >= 0) keys[size_t(nan_at * c.D)] = std::numeric_limits<float>::quiet_NaN();
  c.keys.resize(size_t(S * moxi::kernels::ref::index_key_bytes(c.D)));
  moxi::kernels::ref::quantize_index_keys(keys.data(), c.keys.data(), S, c.D);
  return c;
}

std::vector<int32_t> reference_rows(const indexer_case& c) {
  std::vector<float> scores(size_t(c.T * c.S));
  moxi::kernels::ref::indexer_scores(c.q.data(), c.keys.data(), c.w.data(), scores.data(), c.T, c.S, c.HI, c.D);
  std::vector<int32_t> idx(size_t(c.T * c.k));
  moxi::kernels::ref::indexer_topk(scores.data(), idx.data(), c.T, c.S, c.k);
  return idx;
}

// Every rank's rows, from n threads.
std::vector<std::vector<int32_t>> split_rows(const indexer_case& c, int n) {
  thread_group::shared s(n);
  std::vector<std::vector<int32_t>> rows(size_t(n), std::vector<int32_t>(size_t(c.T * c.k), -7));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      const thread_group g(s, r);
      moxi::model::indexer_topk_split(g, c.q.data(), c.keys.data(), c.w.data(), rows[size_t(r)].data(), c.T, c.S,
                                      c.HI, c.D, c.k);
    });
  for (auto& t : ranks) t.join();
  return rows;
}

void expect_split_equals_reference(const indexer_case& c, const char* what) {
  const auto want = reference_rows(c);
  for (int n = 1; n <= 4; ++n) {
    const auto got = split_rows(c, n);
    for (int r = 0; r < n; ++r) EXPECT_EQ(got[size_t(r)], want) << what << ", " << n << " ranks, rank " << r;
  }
}

TEST(IndexerSplit, RowsEqualTheWholeRowsTopkForAnyNumberOfRanks) {
  expect_split_equals_reference(make_case(1, 1000, 16, 0, -1, 1), "decode, 1000 keys");
  expect_split_equals_reference(make_case(5, 203, 8, 0, -1, 2), "5 queries, 203 keys");
  expect_split_equals_reference(make_case(3, 97, 64, 0, -1, 3), "more than a rank's share selected");
  expect_split_equals_reference(make_case(4, 6, 16, 0, -1, 4), "fewer visible keys than k, padded");
  expect_split_equals_reference(make_case(2, 3, 1, 0, -1, 5), "fewer keys than ranks");
}

TEST(IndexerSplit, TiesAcrossTheRanksSharesGoToTheLowerPosition) {
  // Keys repeat every 7 positions: every score occurs ~70 times, in every rank's share.
  const auto c = make_case(3, 500, 24, 7, -1, 6);
  const auto want = reference_rows(c);
  int64_t ties = 0;
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t j = 1; j < c.k; ++j) ties += want[size_t(t * c.k + j)] % 7 == want[size_t(t * c.k + j - 1)] % 7;
  EXPECT_GT(ties, 0) << "the case has no ties among the selected keys";
  expect_split_equals_reference(c, "repeating keys");
}

TEST(IndexerSplit, NanScoresRankBelowEverything) {
  // A NaN key scores NaN for every query; with k above the visible count it is selected, last.
  expect_split_equals_reference(make_case(2, 40, 64, 0, 13, 7), "NaN, all selected");
  expect_split_equals_reference(make_case(2, 400, 8, 0, 150, 8), "NaN, not selected");
}

}  // namespace
