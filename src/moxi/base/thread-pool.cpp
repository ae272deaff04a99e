// Static thread pool: workers sleep on a generation counter (C++20 atomic wait = futex), wake for each job,
// claim their part and run it. The caller, once its own part is done, claims and runs the parts no worker
// has started, so a descheduled worker (oversubscribed cores) does not stall the job. A short spin before
// sleeping keeps the wake-up latency of back-to-back decode kernels low without burning a shared core long.
#include "moxi/base/thread-pool.h"

#include <sched.h>

#include <cstdlib>
#include <string>

#include "moxi/base/error.h"

namespace moxi {
namespace {

thread_local bool t_in_job = false;  // set while this thread runs a job: nested run() goes inline

constexpr int kSpin = 4000;  // ~ a few microseconds of polling before futex sleep

uint64_t open_claim(uint32_t g) {
  return uint64_t(g) << 1;
}

}  // namespace

thread_pool::thread_pool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads), claim_(new std::atomic<uint64_t>[size_t(n_threads_)]) {
  for (int t = 0; t < n_threads_; ++t) claim_[size_t(t)].store(open_claim(0) | 1, std::memory_order_relaxed);
  workers_.reserve(size_t(n_threads_ - 1));
  for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker(t); });
}

thread_pool::~thread_pool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void thread_pool::worker(int tid) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kSpin; ++i) g = generation_.load(std::memory_order_acquire);
    while (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    const job_fn fn = job_.load(std::memory_order_acquire);
    void* const ctx = ctx_.load(std::memory_order_acquire);
    // Claim this job's part. Failing means the caller took it over (and may since have published a later
    // job, whose fn/ctx were then not the ones read above: they are not used).
    uint64_t expected = open_claim(g);
    if (!claim_[size_t(tid)].compare_exchange_strong(expected, expected | 1, std::memory_order_acq_rel))
      continue;
    t_in_job = true;
    fn(ctx, tid, n_threads_);
    t_in_job = false;
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_threads_ - 1) done_.notify_one();
  }
}

void thread_pool::run_impl(job_fn fn, void* ctx) {
  if (n_threads_ == 1 || t_in_job) {
    fn(ctx, 0, 1);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  // Every part of the previous job is finished (this call waited for it), so nothing reads these now.
  const uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
  job_.store(fn, std::memory_order_relaxed);
  ctx_.store(ctx, std::memory_order_relaxed);
  for (int t = 1; t < n_threads_; ++t) claim_[size_t(t)].store(open_claim(g), std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  generation_.store(g, std::memory_order_release);
  generation_.notify_all();
  t_in_job = true;
  fn(ctx, 0, n_threads_);
  // Parts whose workers have not started yet run here.
  for (int t = 1; t < n_threads_; ++t) {
    uint64_t expected = open_claim(g);
    if (claim_[size_t(t)].compare_exchange_strong(expected, expected | 1, std::memory_order_acq_rel)) {
      fn(ctx, t, n_threads_);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }
  t_in_job = false;
  int d = done_.load(std::memory_order_acquire);
  for (int i = 0; d != n_threads_ - 1 && i < kSpin; ++i) d = done_.load(std::memory_order_acquire);
  while (d != n_threads_ - 1) {
    done_.wait(d, std::memory_order_acquire);
    d = done_.load(std::memory_order_acquire);
  }
}

thread_pool& thread_pool::global() {
  static thread_pool pool([] {
    if (const char* env = std::getenv("MOXI_THREADS")) {
      const int n = std::atoi(env);
      if (n >= 1) return n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
    const unsigned hc = std::thread::hardware_concurrency();
    return hc ? int(hc) : 1;
  }());
  return pool;
}

range split_range(int64_t n, int part, int parts, int64_t align) {
  MOXI_ASSERT(parts >= 1 && part >= 0 && part < parts && align >= 1 && n >= 0);
  const int64_t units = (n + align - 1) / align;  // partition whole aligned units
  const int64_t base = units / parts, extra = units % parts;
  const int64_t u0 = part * base + (part < extra ? part : extra);
  const int64_t u1 = u0 + base + (part < extra ? 1 : 0);
  const int64_t b = u0 * align, e = u1 * align;
  return {b < n ? b : n, e < n ? e : n};
}

}  // namespace moxi
