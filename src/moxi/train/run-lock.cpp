// The run directory's advisory lock (see run-lock.h).
#include "moxi/train/run-lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "moxi/base/error.h"

namespace moxi::train {

run_lock::run_lock(const std::string& dir) {
  const std::string path = dir + "/lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw io_error("open", path, errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    std::string holder;
    if (e == EWOULDBLOCK) {
      char buf[32] = {};
      const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
      for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) holder += buf[i];
    }
    ::close(fd_);
    fd_ = -1;
    if (e != EWOULDBLOCK) throw io_error("flock", path, e);
    throw error("run directory " + dir + " is in use by another training (" +
                (holder.empty() ? std::string("PID unknown") : "PID " + holder) + ", lock " + path +
                "); wait for it to finish or stop it, or pass another --out");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    const int e = errno;
    ::close(fd_);
    fd_ = -1;
    throw io_error("write", path, e);
  }
}

run_lock::~run_lock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock; the file stays (removing it would race a new holder)
}

}  // namespace moxi::train
