// Static thread pool: workers sleep on a generation counter (C++20 atomic wait = futex), wake for each job,
// run it with their index and count down. A short spin before sleeping keeps the wake-up latency of
// back-to-back decode kernels low without burning a shared core for long.
#include "moxi/base/thread-pool.h"

#include <sched.h>

#include <cstdlib>
#include <string>

#include "moxi/base/error.h"

namespace moxi {
namespace {

thread_local bool t_in_job = false;  // set while this thread runs a job: nested run() goes inline

constexpr int kSpin = 4000;  // ~ a few microseconds of polling before futex sleep

}  // namespace

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
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
    t_in_job = true;
    job_(ctx_, tid, n_threads_);
    t_in_job = false;
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void thread_pool::run_impl(job_fn fn, void* ctx) {
  if (n_threads_ == 1 || t_in_job) {
    fn(ctx, 0, 1);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  job_ = fn;
  ctx_ = ctx;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  t_in_job = true;
  fn(ctx, 0, n_threads_);
  t_in_job = false;
  int p = pending_.load(std::memory_order_acquire);
  for (int i = 0; p != 0 && i < kSpin; ++i) p = pending_.load(std::memory_order_acquire);
  while (p != 0) {
    pending_.wait(p, std::memory_order_acquire);
    p = pending_.load(std::memory_order_acquire);
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
