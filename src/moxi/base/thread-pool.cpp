// Static thread pool: workers sleep on a generation counter (C++20 atomic wait = futex), wake for each job,
// claim their part and run it. The caller, once its own part is done, claims and runs the parts no worker
// has started, so a descheduled worker (oversubscribed cores) does not stall the job.
//
// Between jobs a worker first spins (with a pause hint) for a bounded time before it sleeps. A decode step
// is ~100 kernel jobs separated by short serial stretches (norms, routing, small cores); a futex wake-up
// on a VM costs tens of microseconds, comparable to a whole 1-2 MB GEMV, so a worker that went to sleep in
// those stretches cost bench-1.5b decode a third of its speed (docs/kernels-mxfp4.md "Thread-pool spin").
// The budget bounds what an idle pool burns after its last job; MOXI_SPIN_US sets it (0 = sleep at once).
// The pause hint keeps a spinning thread from starving its SMT sibling; a pool larger than the CPUs it runs
// on should use a small budget, since spinners then take time slices from the threads doing the work.
#include "moxi/base/thread-pool.h"

#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "moxi/base/error.h"

namespace moxi {
namespace {

thread_local bool t_in_job = false;  // set while this thread runs a job: nested run() goes inline

// Default spin budget: bench-1.5b decode gained 1.2-1.6x over a 4 us spin, with no clear difference
// between 200 us and 5 ms (docs/kernels-mxfp4.md "Thread-pool spin").
constexpr int64_t kDefaultSpinUs = 1000;
constexpr int64_t kMaxSpinUs = 1'000'000;

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

uint64_t open_claim(uint32_t g) {
  return uint64_t(g) << 1;
}

}  // namespace

// Polls `ready` until it holds or the spin budget is spent; returns whether it held.
template <class Pred>
bool thread_pool::spin_until(Pred ready) const {
  if (ready()) return true;
  if (spin_ns_ == 0) return false;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 1;; ++i) {
    cpu_relax();
    if (ready()) return true;
    if ((i & 63) == 0 &&
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count() >=
            spin_ns_)
      return false;
  }
}

int64_t thread_pool::default_spin_us() {
  static const int64_t us = [] {
    const char* env = std::getenv("MOXI_SPIN_US");
    if (!env) return kDefaultSpinUs;
    char* end = nullptr;
    const long long v = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0 && v <= kMaxSpinUs) return int64_t(v);
    std::fprintf(stderr, "moxi: warning: MOXI_SPIN_US=%s is not an integer in 0..%lld; using %lld\n", env,
                 static_cast<long long>(kMaxSpinUs), static_cast<long long>(kDefaultSpinUs));
    return kDefaultSpinUs;
  }();
  return us;
}

thread_pool::thread_pool(int n_threads, int64_t spin_us)
    : n_threads_(n_threads < 1 ? 1 : n_threads),
      spin_ns_(1000 * (spin_us < 0 ? 0 : spin_us > kMaxSpinUs ? kMaxSpinUs : spin_us)),
      claim_(new std::atomic<uint64_t>[size_t(n_threads_)]) {
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
    uint32_t g = seen;
    spin_until([&] { return (g = generation_.load(std::memory_order_acquire)) != seen; });
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
  int d = 0;
  spin_until([&] { return (d = done_.load(std::memory_order_acquire)) == n_threads_ - 1; });
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
