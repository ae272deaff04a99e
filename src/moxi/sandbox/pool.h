// A fixed set of worker threads running sandboxed episodes concurrently, each in its own workspace,
// fed through a bounded queue so that a producer (the RL rollout loop) is slowed rather than buffering
// without limit.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "moxi/sandbox/sandbox.h"

namespace moxi::sandbox {

class pool {
 public:
  // `workers` concurrent episodes (0 = number of CPUs); submit() blocks while `queue_capacity` episodes
  // are waiting. A non-empty `audit_log` is used for every spec that does not name its own.
  explicit pool(size_t workers = 0, size_t queue_capacity = 64, std::string audit_log = {});
  // Finishes queued episodes, then joins the workers. After an interrupt (base/interrupt.h) the queued
  // ones end at once: their futures hold moxi::interrupted.
  ~pool();
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;

  // Queues one episode. The future holds the result, or the moxi::error thrown for a bad spec.
  std::future<run_result> submit(run_spec spec);
  // Runs all specs and returns their results in the same order.
  std::vector<run_result> run_all(std::vector<run_spec> specs);

  size_t workers() const { return threads_.size(); }

 private:
  struct job {
    run_spec spec;
    std::promise<run_result> result;
  };
  void worker();

  std::string audit_log_;
  size_t capacity_;
  std::mutex mutex_;
  std::condition_variable not_empty_, not_full_;
  std::deque<job> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace moxi::sandbox
