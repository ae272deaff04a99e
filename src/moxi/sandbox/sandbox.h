// Isolated execution of untrusted, model-written commands: the library API used by the RL loop and the
// eval harness (run one episode, or many through sandbox::pool) and by `moxi sandbox run`.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace moxi::sandbox {

// Resource limits of one execution. A zero means "no limit" for cpu_s, memory_bytes, pids,
// file_size_bytes and workspace_bytes; output_bytes zero captures nothing; timeout_s, tmp_bytes,
// shm_bytes, open_files and workspace_inodes must be positive. run() checks every field against its
// range (check_limits).
struct limits {
  double timeout_s = 10;                 // wall clock; on expiry the whole process tree is SIGKILLed
  double cpu_s = 0;                      // CPU seconds of the whole tree (cgroup) or per process (rlimit)
  uint64_t memory_bytes = 512ull << 20;  // resident memory of the tree (cgroup) or address space (rlimit)
  uint32_t pids = 64;                    // live processes + threads in the tree (cgroup) or per uid (rlimit)
  uint64_t file_size_bytes = 64ull << 20;  // largest file a process may write (RLIMIT_FSIZE)
  uint64_t output_bytes = 1ull << 20;      // captured bytes per stream; the rest is drained and counted
  uint32_t open_files = 1024;              // RLIMIT_NOFILE
  uint64_t tmp_bytes = 64ull << 20;        // size of the private /tmp tmpfs
  uint64_t shm_bytes = 16ull << 20;        // size of the private /dev/shm tmpfs (/dev itself is read-only)
  // The workspace's byte and inode budget: the command writes into a tmpfs of this size, copied from
  // the host directory before the run and back after it; a full budget ends the run (limit_kind::disk).
  // Needs CAP_SYS_ADMIN (a root caller); elsewhere mechanisms.disk says "none". 0 = write the host
  // directory directly, without a budget.
  uint64_t workspace_bytes = 256ull << 20;
  uint64_t workspace_inodes = 16384;
  // Use a per-run cgroup where the machine allows; false forces the rlimit fallback (tests, or hosts
  // where another manager owns the hierarchy).
  bool use_cgroup = true;
};

// What the sandboxed process may see and do beyond the fixed policy (docs/sandbox.md).
struct policy {
  // Allows AF_INET/AF_INET6 sockets. The process still has its own network namespace, so only its own
  // loopback is reachable; off by default because the issue asks for AF_UNIX only.
  bool allow_inet = false;
  // Extra read-only binds {host path, sandbox path}, e.g. a toolchain or a task's fixture directory.
  std::vector<std::pair<std::string, std::string>> ro_binds;
  // Where the workspace appears inside; also HOME and the working directory. Absolute and normal, not
  // `/` and not under /bin, /dev, /etc, /lib*, /proc, /sbin, /sys, /tmp or /usr (run() throws).
  std::string workspace_mount = "/workspace";
  // Host identity of the sandbox when the caller is root (ignored otherwise), so that root-owned host
  // files stay protected by ordinary permissions even inside the user namespace. Each run holds a uid of
  // the pool [uid_pool_first, uid_pool_first + uid_pool_size) alone while it lasts (machine-wide, across
  // moxi processes), so that per-uid limits and permissions never cross runs: RLIMIT_NPROC, the process
  // limit without a cgroup, counts every process of a uid. Runs sharing a workspace (shared_workspace)
  // all run as `uid`, the one owner of the files they write, as does every run when uid_pool_size is 0.
  // No account should use the pool's uids; the default range lies above the ones systemd hands out to
  // containers and below 2^31 (docs/sandbox.md "Identity"). run() checks the ranges (check_policy).
  uid_t uid = 65534;
  gid_t gid = 65534;
  uid_t uid_pool_first = 0x70000000;
  uint32_t uid_pool_size = 4096;
};

struct run_spec {
  std::vector<std::string> argv;  // argv[0] is resolved on the sandbox's PATH
  // Host directory; empty = a fresh temporary one. A given directory is resolved without following
  // links and must be owned by the caller, not shared (world-writable/sticky) and not a system
  // directory (docs/sandbox.md#workspace).
  std::string workspace;
  // Lets concurrent runs use the same workspace (each holds a shared lock); by default a run holds an
  // exclusive lock and run() throws when another run has the workspace.
  bool shared_workspace = false;
  bool keep_workspace = false;             // keep a temporary workspace after the run
  std::map<std::string, std::string> env;  // added to the clean environment
  std::string stdin_data;                  // fed to stdin (then EOF); stdin is empty by default
  struct limits limits;
  struct policy policy;
  std::string audit_log;  // append one JSON line here; empty = no log
  std::string id;         // episode id recorded in the audit log
};

// Which limit ended or constrained a run.
enum class limit_kind { none, timeout, cpu, memory, pids, file_size, output, disk };
const char* to_string(limit_kind k);

// How each resource limit was enforced on this machine: "cgroup-v2", "cgroup-v1", "rlimit" or "none";
// disk: "tmpfs" (the workspace budget) or "none".
struct mechanisms {
  std::string memory, pids, cpu, disk;
};

struct captured_stream {
  std::string data;    // at most limits.output_bytes
  uint64_t bytes = 0;  // everything the child wrote
  bool truncated = false;
  uint64_t xxh3 = 0;  // XXH3-64 of everything the child wrote (not only the captured part)
};

struct run_result {
  // false: the command never ran, i.e. bubblewrap did not reach a successful exec of it (setup failure
  // or command not found), as bubblewrap reports on its status descriptor, which the command cannot
  // write (see error). A run moxi killed (a limit fired) has no such report and counts as started
  // once bwrap had created the sandbox's first process.
  bool started = false;
  std::string error;   // setup failure, or a workspace copy-back that was incomplete; empty otherwise
  int exit_code = -1;  // exit status of the command; 128+N when killed by signal N
  int signal = 0;      // the signal that killed the command, 0 if it exited
  double duration_s = 0;
  double cpu_s = 0;  // user+system CPU of the tree
  uint64_t peak_memory_bytes = 0;
  captured_stream out, err;
  limit_kind fired = limit_kind::none;  // the limit that killed the run (timeout, cpu, memory, file_size)
  std::vector<limit_kind> hit;          // every limit reached, including ones that only constrained it
  struct mechanisms mechanisms;
  std::string workspace;  // the host workspace used
  uid_t uid = 0;          // the host uid the command ran as (the caller's own when not root)
  std::string cgroup;     // the per-run cgroup (empty when rlimits only)

  bool hit_limit(limit_kind k) const;
  bool ok() const { return started && exit_code == 0 && fired == limit_kind::none; }
};

// Throws moxi::error naming the field when a limit is outside its range (docs/sandbox.md#limits): NaN,
// infinite, negative, or so large that a conversion would overflow.
void check_limits(const limits& l);

// Throws moxi::error unless `m` is a usable policy::workspace_mount (see there).
void check_workspace_mount(const std::string& m);

// Throws moxi::error naming the field when the policy's identity is unusable: a uid or gid of root, a
// uid pool that reaches root or the invalid uid (uid_t)-1, or one that holds policy::uid.
void check_policy(const policy& p);

// Runs one command to completion under the policy and limits; thread-safe, never throws for anything
// the command does. Throws moxi::error for a bad spec (empty argv, a limit out of range, an unusable
// workspace or one in use by another run). Throws moxi::interrupted (base/interrupt.h) when SIGINT or
// SIGTERM arrived under an interrupt_guard: at once if it came before the run, else once the whole tree
// is killed and gone, its cgroup removed and a temporary workspace deleted (docs/sandbox.md "Interrupts").
run_result run(const run_spec& spec);

// Removes per-run cgroups (moxi-sb-*) below the caller's cgroup whose owning process is gone (a moxi
// that was SIGKILLed cannot remove its own); returns how many were removed. Called by pool's
// constructor and once per process by run().
int sweep_stale_cgroups();

// The path of the bwrap binary (MOXI_BWRAP overrides, else /usr/bin/bwrap); throws if absent.
std::string bwrap_path();

}  // namespace moxi::sandbox
