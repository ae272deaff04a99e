// A per-run cgroup that enforces memory and process-count limits on a whole sandboxed process tree and
// measures its CPU time and peak memory. cgroup v2 where the unified hierarchy has the controllers, v1
// otherwise (this project's machines); controllers that cannot be created leave the caller to fall back
// to rlimits.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moxi::sandbox {

class run_cgroup {
 public:
  // Creates moxi-sb-<pid>-<n> under the caller's own cgroup for each usable controller and writes the
  // limits (0 = no limit). Never throws: what could not be set up is simply absent.
  run_cgroup(uint64_t memory_bytes, uint32_t pids_max);
  run_cgroup() = default;  // no cgroup at all: every query answers "not in use"
  ~run_cgroup();
  run_cgroup(const run_cgroup&) = delete;
  run_cgroup& operator=(const run_cgroup&) = delete;

  bool memory() const { return !memory_dir_.empty(); }
  bool pids() const { return !pids_dir_.empty(); }
  bool cpu() const { return !cpu_dir_.empty(); }
  // "cgroup-v2" or "cgroup-v1".
  const char* mechanism() const { return v2_ ? "cgroup-v2" : "cgroup-v1"; }
  // One of the directories, for the record (empty when no controller is in use).
  std::string path() const;
  // The cgroup.procs files a new process must write its pid into (one per distinct directory).
  const std::vector<std::string>& procs_files() const { return procs_files_; }

  // SIGKILLs every member until the group is empty or `max_wait_ms` passes; returns true when empty.
  bool kill_all(int max_wait_ms);
  // Waits (polling) until the group has no members; returns true when empty.
  bool wait_empty(int max_wait_ms) const;

  uint64_t peak_memory_bytes() const;
  bool memory_oom_killed() const;  // the kernel OOM-killed a member because of the limit
  bool memory_limit_reached() const;
  bool pids_limit_reached() const;  // a fork/clone was refused because of pids.max
  double cpu_seconds() const;       // user+system CPU of all members, dead or alive

 private:
  std::vector<pid_t> members() const;
  bool v2_ = false;
  std::string memory_dir_, pids_dir_, cpu_dir_;
  std::vector<std::string> dirs_;  // distinct directories we created, removed in the destructor
  std::vector<std::string> procs_files_;
};

}  // namespace moxi::sandbox
