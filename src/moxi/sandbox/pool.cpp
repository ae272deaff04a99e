// The sandbox worker pool (see pool.h).
#include "moxi/sandbox/pool.h"

#include <algorithm>
#include <exception>

namespace moxi::sandbox {

pool::pool(size_t workers, size_t queue_capacity, std::string audit_log)
    : audit_log_(std::move(audit_log)), capacity_(queue_capacity ? queue_capacity : 1) {
  sweep_stale_cgroups();  // groups left by a moxi that was killed before it could remove them
  if (workers == 0) workers = std::max(1u, std::thread::hardware_concurrency());
  threads_.reserve(workers);
  for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { worker(); });
}

pool::~pool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  not_empty_.notify_all();
  not_full_.notify_all();
  for (auto& t : threads_) t.join();
}

std::future<run_result> pool::submit(run_spec spec) {
  if (spec.audit_log.empty()) spec.audit_log = audit_log_;
  std::unique_lock<std::mutex> lock(mutex_);
  not_full_.wait(lock, [&] { return queue_.size() < capacity_ || stopping_; });
  queue_.push_back(job{std::move(spec), {}});
  auto f = queue_.back().result.get_future();
  lock.unlock();
  not_empty_.notify_one();
  return f;
}

std::vector<run_result> pool::run_all(std::vector<run_spec> specs) {
  std::vector<std::future<run_result>> futures;
  futures.reserve(specs.size());
  for (auto& s : specs) futures.push_back(submit(std::move(s)));
  std::vector<run_result> out;
  out.reserve(futures.size());
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

void pool::worker() {
  for (;;) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping and drained
    job j = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    not_full_.notify_one();
    try {
      j.result.set_value(run(j.spec));
    } catch (...) {
      j.result.set_exception(std::current_exception());
    }
  }
}

}  // namespace moxi::sandbox
