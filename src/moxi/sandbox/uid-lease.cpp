#include "moxi/sandbox/uid-lease.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "moxi/base/error.h"

namespace moxi::sandbox::detail {

namespace {

// A file system with no room for it (read-only, or no such parent): nothing to lock in, not an attack.
bool unavailable(int e) {
  return e == EROFS || e == EACCES || e == EPERM || e == ENOENT || e == ENOTDIR;
}

// -1 when the directory cannot be made (unavailable()).
unique_fd open_lock_dir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    if (unavailable(errno)) return unique_fd();
    throw io_error("create", dir, errno);
  }
  unique_fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) throw io_error("open uid lock directory", dir, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) throw io_error("stat", dir, errno);
  // Whoever could write here could hold every uid's lock, or swap a lock file for their own.
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
    throw error("sandbox: uid lock directory '" + dir + "' must belong to uid " +
                std::to_string(::geteuid()) + " and be writable by it alone");
  return fd;
}

}  // namespace

bool uids_mapped(const std::string& uid_map, uint64_t first, uint64_t count) {
  // The ranges may come in any order: walk from `first`, each step through the range that holds it.
  std::vector<std::array<uint64_t, 2>> ranges;  // [begin, end) inside the namespace
  std::istringstream in(uid_map);
  uint64_t inside, outside, n;
  while (in >> inside >> outside >> n) ranges.push_back({inside, inside + n});
  for (uint64_t at = first, end = first + count; at < end;) {
    uint64_t next = at;
    for (const auto& r : ranges)
      if (r[0] <= at && at < r[1]) next = r[1];
    if (next == at) return false;
    at = next;
  }
  return true;
}

bool uids_mapped(uint64_t first, uint64_t count) {
  // Read each time (a few microseconds): a process may have entered another user namespace since.
  std::ifstream f("/proc/self/uid_map");
  std::ostringstream map;
  map << f.rdbuf();
  return uids_mapped(map.str(), first, count);
}

uid_lease uid_lease::take(uid_t first, uint32_t count, const std::string& lock_dir, int wait_ms) {
  if (count == 0) throw error("sandbox: an empty uid pool");
  const unique_fd dir = open_lock_dir(lock_dir);
  if (dir.get() < 0) return uid_lease();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    // The lowest free uid: a machine needs only as many lock files as it ever runs sandboxes at once.
    for (uint32_t i = 0; i < count; ++i) {
      const uid_t uid = first + i;
      const std::string name = "uid-" + std::to_string(uid);
      unique_fd fd(::openat(dir.get(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
      if (fd.get() < 0 && errno == EROFS) return uid_lease();  // a lock directory left on a read-only root
      if (fd.get() < 0) throw io_error("open uid lock", lock_dir + "/" + name, errno);
      int rc;
      do {
        rc = ::flock(fd.get(), LOCK_EX | LOCK_NB);
      } while (rc != 0 && errno == EINTR);
      if (rc == 0) {
        uid_lease lease;
        lease.lock_ = std::move(fd);
        lease.uid_ = uid;
        return lease;
      }
      if (errno != EWOULDBLOCK) throw io_error("lock", lock_dir + "/" + name, errno);
    }
    // All held. A lock can also look held for a moment after its run ended: another thread's launcher
    // child, cloned meanwhile, holds a copy of the descriptor until it execs.
    if (std::chrono::steady_clock::now() >= deadline)
      throw error("sandbox: all " + std::to_string(count) + " sandbox uids from " + std::to_string(first) +
                  " are held by other runs (raise policy.uid_pool_size)");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace moxi::sandbox::detail
