// One training per run directory: an advisory lock (flock) on RUN/lock, held for the life of the run. A
// second `moxi train` on the same directory stops at once with an error naming the holder's PID instead of
// interleaving its log lines and checkpoints with the first one's. The kernel drops the lock when the holder
// exits, however it exits, so a killed run never leaves the directory locked.
#pragma once

#include <string>

namespace moxi::train {

class run_lock {
 public:
  // Creates dir/lock if needed, locks it and writes this process's PID into it; throws moxi::error naming
  // the directory and the PID of the process that holds it.
  explicit run_lock(const std::string& dir);
  ~run_lock();
  run_lock(const run_lock&) = delete;
  run_lock& operator=(const run_lock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace moxi::train
