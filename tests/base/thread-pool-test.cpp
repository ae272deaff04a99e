// Thread pool: every index runs exactly once per job, jobs see each other's writes, nested calls run
// inline, and split_range covers [0, n) exactly with aligned starts.
#include "moxi/base/thread-pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace {

TEST(ThreadPool, EveryIndexRunsOncePerJobAcrossManyJobs) {
  for (int n : {1, 2, 3, 5}) {
    moxi::thread_pool pool(n);
    ASSERT_EQ(pool.size(), n);
    std::vector<int> counts(size_t(n), 0);
    for (int job = 0; job < 2000; ++job) {
      pool.run([&](int tid, int nt) {
        ASSERT_EQ(nt, n);
        counts[size_t(tid)] += 1;  // each tid writes only its slot; run() returning publishes the writes
      });
    }
    for (int c : counts) EXPECT_EQ(c, 2000);
  }
}

TEST(ThreadPool, NestedRunIsInlineAndSumsAreComplete) {
  moxi::thread_pool pool(2);
  std::atomic<int64_t> total{0};
  pool.run([&](int, int) {
    pool.run([&](int tid, int nt) {
      EXPECT_EQ(tid, 0);
      EXPECT_EQ(nt, 1);
      total += 1;
    });
  });
  EXPECT_EQ(total.load(), 2);
}

TEST(ThreadPool, SplitRangeCoversExactlyWithAlignedStarts) {
  for (int64_t n : {0, 1, 7, 16, 17, 100, 4096})
    for (int parts : {1, 2, 3, 7})
      for (int64_t align : {1, 4, 16}) {
        int64_t next = 0;
        for (int p = 0; p < parts; ++p) {
          const moxi::range r = moxi::split_range(n, p, parts, align);
          EXPECT_EQ(r.begin, next);
          EXPECT_LE(r.begin, r.end);
          if (r.begin < n) {
            EXPECT_EQ(r.begin % align, 0);
          }
          next = r.end;
        }
        EXPECT_EQ(next, n);
      }
}

}  // namespace
