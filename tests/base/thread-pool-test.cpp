// Thread pool: every index runs exactly once per job (also when the caller takes over parts of workers that
// have not started), jobs see each other's writes, nested calls run inline, and split_range covers [0, n)
// exactly with aligned starts.
#include "moxi/base/thread-pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
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

// More workers than CPUs: many workers are not running when a job starts, so the caller takes over their
// parts. Every part must still run exactly once per job, and its writes must be visible when run() returns.
TEST(ThreadPool, EveryPartRunsOnceWhenTheCallerTakesOverUnstartedParts) {
  const int n = 16;
  moxi::thread_pool pool(n);
  const auto caller = std::this_thread::get_id();
  int64_t taken_over = 0;
  for (int job = 0; job < 3000; ++job) {
    std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
    std::vector<int> plain(static_cast<size_t>(n), 0);
    std::atomic<int> by_caller{0};
    pool.run([&](int tid, int nt) {
      ASSERT_EQ(nt, n);
      runs[size_t(tid)].fetch_add(1);
      plain[size_t(tid)] = job + 1;  // non-atomic: must be published by run() returning
      if (tid != 0 && std::this_thread::get_id() == caller) by_caller.fetch_add(1);
    });
    for (int t = 0; t < n; ++t) {
      ASSERT_EQ(runs[size_t(t)].load(), 1) << "job " << job << " part " << t;
      ASSERT_EQ(plain[size_t(t)], job + 1);
    }
    taken_over += by_caller.load();
  }
  std::printf("parts run by the caller instead of their worker: %lld of %d\n", (long long)taken_over,
              3000 * (n - 1));
}

// Workers wait for a job by spinning up to a budget, then sleeping on a futex. Gaps longer than the budget
// between jobs make them sleep and be woken; both paths must run every part once and publish its writes.
TEST(ThreadPool, JobsCompleteWhetherWorkersSpinOrSleepBetweenThem) {
  for (const int64_t spin_us : {int64_t(0), int64_t(50), int64_t(1000)}) {
    moxi::thread_pool pool(3, spin_us);
    ASSERT_EQ(pool.spin_us(), spin_us);
    std::vector<int> plain(3, 0);
    for (int job = 0; job < 300; ++job) {
      // Every 25th job comes after a pause longer than the spin budget: the workers are asleep by then.
      if (job % 25 == 0) std::this_thread::sleep_for(std::chrono::microseconds(2 * spin_us + 500));
      pool.run([&](int tid, int nt) {
        ASSERT_EQ(nt, 3);
        plain[size_t(tid)] = job + 1;
      });
      for (int t = 0; t < 3; ++t) ASSERT_EQ(plain[size_t(t)], job + 1) << "spin " << spin_us << " job " << job;
    }
  }
}

TEST(ThreadPool, SpinBudgetIsClampedToItsRange) {
  EXPECT_EQ(moxi::thread_pool(2, -5).spin_us(), 0);
  EXPECT_EQ(moxi::thread_pool(2, 5'000'000).spin_us(), 1'000'000);
  EXPECT_GE(moxi::thread_pool::default_spin_us(), 0);
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
