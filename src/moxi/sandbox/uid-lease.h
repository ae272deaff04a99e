// A host uid held by one sandbox run alone, so that what the kernel counts or permits per uid
// (RLIMIT_NPROC, kill(2), files the run owns) never crosses between runs that overlap in time. Runs of
// every moxi process on the machine coordinate through one lock file per uid (flock, released by the
// kernel when its holder closes it or dies), in a root-only directory (docs/sandbox.md "Identity").
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "moxi/sandbox/workspace.h"

namespace moxi::sandbox::detail {

// Where root moxi processes keep the uid locks.
inline constexpr const char* kUidLockDir = "/run/moxi-sandbox";

// Whether every uid of [first, first + count) has an identity in the user namespace whose uid_map is
// `uid_map` (lines "inside outside count", as /proc/self/uid_map): a container with a user namespace
// maps only a range (often 0-65535), and setresuid to an unmapped uid fails.
bool uids_mapped(const std::string& uid_map, uint64_t first, uint64_t count);
// The same for this process's user namespace.
bool uids_mapped(uint64_t first, uint64_t count);

class uid_lease {
 public:
  uid_lease() = default;
  // Takes the lowest uid of [first, first + count) that no other run holds, waiting up to `wait_ms` for
  // one to come free. Creates `lock_dir` (mode 0700) when missing and refuses one that is a link, not
  // owned by the caller, or writable by others. Returns an empty lease (held() false) where the directory
  // cannot exist: a read-only root file system (a hardened container), no parent. Throws moxi::error when
  // every uid stays held.
  static uid_lease take(uid_t first, uint32_t count, const std::string& lock_dir = kUidLockDir,
                        int wait_ms = 1000);
  uid_t uid() const { return uid_; }
  bool held() const { return lock_.get() >= 0; }

 private:
  unique_fd lock_;
  uid_t uid_ = 0;
};

}  // namespace moxi::sandbox::detail
