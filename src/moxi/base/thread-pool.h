// A small static thread pool for the kernels (docs/design.md §1): a fixed set of workers that
// all run the same job with their thread index, so kernels partition work statically (no task queue, no
// allocation per job, no work stealing) and results do not depend on scheduling.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace moxi {

class thread_pool {
 public:
  // n_threads >= 1 counts the calling thread: n_threads - 1 workers are started. Between jobs a worker (and
  // the caller waiting for the workers) polls for up to spin_us microseconds before it sleeps on a futex:
  // a decode step is ~100 jobs with short serial stretches between them, and a futex wake-up costs tens of
  // microseconds on a VM (docs/kernels-mxfp4.md "Thread-pool spin"). 0 = sleep at once.
  explicit thread_pool(int n_threads, int64_t spin_us = default_spin_us());
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(tid, n) for tid = 0 .. n-1, each exactly once, and returns when all have finished. tid 0 runs
  // on the calling thread, tid t on worker t unless that worker has not started it by the time the caller
  // is done with its own part: then the caller runs it (a worker descheduled on an oversubscribed machine
  // costs one part's time, not a scheduler time slice). Which thread runs a part never changes what the part
  // computes, so results do not depend on the schedule. fn must not throw. Calls from several threads are
  // serialized; a call from inside a job runs the whole job inline on that thread (tid 0 of 1), so nested
  // parallel kernels stay correct.
  template <class F>
  void run(F&& fn) {
    run_impl(&invoke<std::remove_reference_t<F>>, const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // run(fn) when `work` is at least two threads' worth of `min_per_thread` (both in the caller's units, e.g.
  // multiply-adds), else fn(0, 1) inline on the calling thread. Waking the workers costs a few microseconds;
  // below the threshold it costs more than splitting saves (tiny models, single-token decode of small
  // layers), so kernels call this with a threshold measured for their work (docs/kernels-mxfp4.md).
  template <class F>
  void run_if(int64_t work, int64_t min_per_thread, F&& fn) {
    if (n_threads_ == 1 || work < 2 * min_per_thread)
      fn(0, 1);
    else
      run(std::forward<F>(fn));
  }

  // The process-wide pool used by the kernels: MOXI_THREADS if set (>= 1), else the number of CPUs this
  // process may run on. Created on first use.
  static thread_pool& global();
  // MOXI_SPIN_US if set (0 .. 1000000), else 1000 (measured: docs/kernels-mxfp4.md "Thread-pool spin").
  static int64_t default_spin_us();
  int64_t spin_us() const { return spin_ns_ / 1000; }

 private:
  using job_fn = void (*)(void*, int, int);
  template <class F>
  static void invoke(void* f, int tid, int n) {
    (*static_cast<F*>(f))(tid, n);
  }
  void run_impl(job_fn fn, void* ctx);
  void worker(int tid);
  template <class Pred>
  bool spin_until(Pred ready) const;

  int n_threads_;
  int64_t spin_ns_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;              // one job at a time
  std::atomic<job_fn> job_{nullptr};  // written before generation_ is bumped (release)
  std::atomic<void*> ctx_{nullptr};
  std::atomic<uint32_t> generation_{0};  // bumped once per job; workers wait on it
  // Per part 1..n-1: (generation << 1) while open, | 1 once taken by its worker or by the caller.
  std::unique_ptr<std::atomic<uint64_t>[]> claim_;
  std::atomic<int> done_{0};  // parts 1..n-1 finished in the current job
  std::atomic<bool> stop_{false};
};

// Static partition of [0, n) into `parts` contiguous ranges whose starts are multiples of `align`
// (except the end); part i gets [begin, end). Sizes differ by at most `align`.
struct range {
  int64_t begin, end;
};
range split_range(int64_t n, int part, int parts, int64_t align = 1);

}  // namespace moxi
