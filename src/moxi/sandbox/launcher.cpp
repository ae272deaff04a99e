// sandbox::run: launches one command under bubblewrap with moxi's policy and enforces the limits.
//
// Process layout: moxi --clone(VM|VFORK)--> launcher child (setsid, join cgroup, rlimits, fds 0-3 only,
// drop to the sandbox uid when root, no_new_privs) --exec--> bwrap (outer monitor) --> bwrap as PID 1 of
// the new PID namespace --> the command. Killing the outer bwrap kills PID 1 (--die-with-parent), and the
// death of PID 1 makes the kernel kill every process left in the namespace, so the whole tree goes with
// it whether or not a cgroup is available; moxi, a subreaper, reaps PID 1 (sandbox_init::reap). The
// seccomp filter is compiled here and handed to bwrap as a sealed memfd (--seccomp 3); bwrap installs it
// in the command's process right before exec. A root caller's run drops to a uid of its own
// (uid-lease.h).
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/sandbox/audit-log.h"
#include "moxi/sandbox/cgroup.h"
#include "moxi/sandbox/sandbox.h"
#include "moxi/sandbox/seccomp-policy.h"
#include "moxi/sandbox/uid-lease.h"
#include "moxi/sandbox/workspace.h"

namespace moxi::sandbox {

const char* to_string(limit_kind k) {
  switch (k) {
    case limit_kind::none:
      return "none";
    case limit_kind::timeout:
      return "timeout";
    case limit_kind::cpu:
      return "cpu";
    case limit_kind::memory:
      return "memory";
    case limit_kind::pids:
      return "pids";
    case limit_kind::file_size:
      return "file_size";
    case limit_kind::output:
      return "output";
    case limit_kind::disk:
      return "disk";
  }
  return "?";
}

bool run_result::hit_limit(limit_kind k) const {
  return std::find(hit.begin(), hit.end(), k) != hit.end();
}

std::string bwrap_path() {
  const char* env = std::getenv("MOXI_BWRAP");
  std::string path = env && *env ? env : "/usr/bin/bwrap";
  if (::access(path.c_str(), X_OK) != 0)
    throw error("sandbox: bubblewrap not found at '" + path + "' (install the Debian package bubblewrap)");
  return path;
}

namespace {

using clock_type = std::chrono::steady_clock;

// bwrap runs two processes of its own in the tree (the outer monitor and PID 1); the pids limit the user
// gives counts only the command's processes.
constexpr uint32_t kBwrapProcesses = 2;

class fd_guard {
 public:
  explicit fd_guard(int fd = -1) : fd_(fd) {}
  ~fd_guard() { reset(); }
  fd_guard(const fd_guard&) = delete;
  fd_guard& operator=(const fd_guard&) = delete;
  int get() const { return fd_; }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// Moves fd to a number >= 16 so that the child's dup2 onto 0..3 can never clobber a source it still
// needs; keeps O_CLOEXEC so that concurrent launches in other threads never inherit it.
int high_fd(int fd) {
  if (fd < 0) return fd;
  int h = ::fcntl(fd, F_DUPFD_CLOEXEC, 16);
  int e = errno;
  ::close(fd);
  if (h < 0) throw io_error("fcntl(F_DUPFD)", "sandbox pipe", e);
  return h;
}

// The read-only system view: directories bound as they are, top-level symlinks (merged /usr) recreated.
struct system_entry {
  std::string path, link_target;  // link_target set: recreate as a symlink
};

const std::vector<system_entry>& system_view() {
  static const std::vector<system_entry> view = [] {
    std::vector<system_entry> v;
    for (const char* p : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}) {
      struct stat st;
      if (::lstat(p, &st) != 0) continue;
      if (S_ISLNK(st.st_mode)) {
        char buf[PATH_MAX];
        ssize_t n = ::readlink(p, buf, sizeof buf - 1);
        if (n <= 0) continue;
        v.push_back({p, std::string(buf, static_cast<size_t>(n))});
      } else if (S_ISDIR(st.st_mode)) {
        v.push_back({p, {}});
      }
    }
    return v;
  }();
  return view;
}

using detail::unique_fd;

// A uid a root caller's run may have handed a workspace to: policy.uid or one of the pool's.
bool is_sandbox_uid(const policy& p, uid_t u) {
  return u == p.uid || (u >= p.uid_pool_first && u - p.uid_pool_first < p.uid_pool_size);
}

// Who the command runs as: a root caller drops to a uid of its own (a lease on the pool) or, for a
// shared workspace, an empty pool, one its user namespace does not map or no place for the lock files,
// to policy.uid; anyone else stays who they are.
struct identity {
  bool drop = false;
  uid_t uid = 0;
  gid_t gid = 0;
  detail::uid_lease lease;
};

identity run_identity(const run_spec& spec) {
  identity id;
  id.drop = ::geteuid() == 0;
  if (!id.drop) {
    id.uid = ::geteuid();
    id.gid = ::getegid();
    return id;
  }
  const auto& p = spec.policy;
  id.gid = p.gid;
  id.uid = p.uid;
  // In a user namespace that does not map the pool (a container's 0-65535), runs share policy.uid.
  if (!spec.shared_workspace && p.uid_pool_size > 0 &&
      detail::uids_mapped(p.uid_pool_first, p.uid_pool_size)) {
    id.lease = detail::uid_lease::take(p.uid_pool_first, p.uid_pool_size);
    if (id.lease.held()) id.uid = id.lease.uid();  // else no lock directory can exist here: policy.uid
  }
  return id;
}

// The workspace of one run: the host directory (resolved once, locked), and when the budget applies
// the tmpfs the command writes into instead.
struct workspace {
  std::string path;
  unique_fd dir;     // the host directory, O_RDONLY, holding the run's flock
  unique_fd mount;   // the budget tmpfs (a detached mount until the launcher attaches it), or -1
  unique_fd parent;  // shared workspaces with a budget: its parent, locked while copying (copy_guard)
  bool temporary = false;
  bool keep = false;
  ~workspace() {
    mount.reset();
    dir.reset();
    if (temporary && !keep && !path.empty()) detail::remove_tree(path);
  }
};

// The sandbox's PID 1 (bwrap inside the new PID namespace) by a pidfd, opened from the host pid bwrap
// reports and accepted only while it is still bwrap's child or, orphaned, ours (find), so a recycled pid
// is never signalled or waited for.
struct sandbox_init {
  unique_fd fd;
  bool failed = false;  // reported but not (or no longer) reachable: fall back to killing bwrap

  bool known() const { return fd.get() >= 0; }

  // Looks for {"child-pid": N} in bwrap's status text and opens N by pidfd if it is still PID 1: a child
  // of `bwrap` (our child), or, once bwrap has exited, ours (moxi is the subreaper orphans pass to). A
  // recycled pid could pass the second test only if PID 1 had been reaped by bwrap and the kernel's pid
  // counter had gone once around pid_max since.
  void find(const std::string& status, pid_t bwrap) {
    const size_t key = status.find("\"child-pid\"");
    if (key == std::string::npos) return;
    size_t at = status.find_first_of("0123456789", key);
    const size_t end = at == std::string::npos ? at : status.find_first_not_of("0123456789", at);
    if (end == std::string::npos) return;  // the number may not be complete yet
    const long pid = std::strtol(status.c_str() + at, nullptr, 10);
    unique_fd f(static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0)));
    const pid_t parent = pid > 0 && f.get() >= 0 ? parent_of(static_cast<pid_t>(pid)) : -1;
    if (parent != bwrap && parent != ::getpid()) {
      failed = true;
      return;
    }
    fd = std::move(f);
  }

  bool kill() {
    if (::syscall(SYS_pidfd_send_signal, fd.get(), SIGKILL, nullptr, 0) == 0) return true;
    failed = true;
    return false;
  }

  // Waits until PID 1 has exited, which the kernel allows only once every other process of its
  // namespace is gone; after a grace, kills it. Then reaps it (reap()).
  void wait_gone() {
    if (!known()) return;
    for (int round = 0; round < 2; ++round) {
      const auto until = clock_type::now() + std::chrono::milliseconds(round == 0 ? 2000 : 1000);
      for (;;) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - clock_type::now()).count();
        if (left <= 0) break;
        pollfd p = {fd.get(), POLLIN, 0};
        const int n = ::poll(&p, 1, static_cast<int>(left));
        if (n > 0) return;
        if (n < 0 && errno != EINTR) return;
      }
      kill();
    }
  }

  // bwrap's outer process leaves without waiting for PID 1, which then passes to the nearest subreaper:
  // moxi (run() makes it one). Reaping it here, rather than leaving it to the host's init, which may reap
  // late or never (a container whose PID 1 is moxi), ends its count against the uid (RLIMIT_NPROC) and
  // its pid with the run. Not our child (bwrap reaped it, or no subreaper): nothing to do.
  void reap() {
    if (!known()) return;
    siginfo_t si;
    constexpr auto kPidfd = static_cast<idtype_t>(3);  // P_PIDFD of linux/wait.h (Linux 5.4)
    while (::waitid(kPidfd, static_cast<id_t>(fd.get()), &si, WEXITED | WNOHANG) != 0 && errno == EINTR) {
    }
  }

  // The parent pid from /proc/PID/stat ("pid (comm) state ppid ..."; comm may hold anything but the
  // last ')' ends it); -1 when unreadable.
  static pid_t parent_of(pid_t pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    unique_fd f(::open(path, O_RDONLY | O_CLOEXEC));
    if (f.get() < 0) return -1;
    char buf[1024];
    const ssize_t n = ::read(f.get(), buf, sizeof buf - 1);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char* close = std::strrchr(buf, ')');
    char state = 0;
    int ppid = -1;
    if (!close || std::sscanf(close + 1, " %c %d", &state, &ppid) != 2) return -1;
    return ppid;
  }
};

// Runs sharing a workspace hold only a shared lock on it; their copies in and back are serialised by
// an exclusive lock on the parent directory, so that no run copies in a tree another is rewriting.
class copy_guard {
 public:
  explicit copy_guard(const workspace& ws) : fd_(ws.parent.get()) {
    if (fd_ >= 0)
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  ~copy_guard() {
    if (fd_ >= 0) ::flock(fd_, LOCK_UN);
  }
  copy_guard(const copy_guard&) = delete;
  copy_guard& operator=(const copy_guard&) = delete;

 private:
  int fd_;
};

void prepare_workspace(const run_spec& spec, const identity& id, workspace& ws, run_result& r) {
  const bool drop = id.drop;
  if (spec.workspace.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/moxi-ws-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw io_error("create temporary workspace", tmpl, errno);
    ws.temporary = true;
    ws.keep = spec.keep_workspace;
    ws.dir = detail::open_dir_nofollow(tmpl, false, &ws.path);
  } else {
    ws.dir = detail::open_dir_nofollow(spec.workspace, true, &ws.path);
    detail::check_workspace_rules(ws.dir.get(), ws.path,
                                  [&](uid_t u) { return is_sandbox_uid(spec.policy, u); });
  }
  if (!detail::lock_workspace(ws.dir.get(), spec.shared_workspace))
    throw error(
        "sandbox: workspace '" + ws.path +
        "' is in use by another run (set run_spec.shared_workspace / --shared-workspace to share it)");
  if (drop) {
    // bwrap runs as the sandbox uid and must be able to reach the workspace to bind it.
    std::filesystem::path p(ws.path);
    for (auto dir = p.parent_path(); !dir.empty(); dir = dir.parent_path()) {
      struct stat st;
      if (::stat(dir.c_str(), &st) == 0 && !(st.st_mode & S_IXOTH) && st.st_uid != id.uid)
        throw error("sandbox: workspace '" + ws.path + "' is not reachable by the sandbox uid " +
                    std::to_string(id.uid) + " because '" + dir.string() +
                    "' is not world-searchable; use a directory under /tmp");
      if (dir == dir.root_path()) break;
    }
  }
  const auto& lim = spec.limits;
  r.mechanisms.disk = "none";
  if (lim.workspace_bytes) {
    ws.mount.reset(detail::make_tmpfs(lim.workspace_bytes, lim.workspace_inodes, id.uid, id.gid));
    if (ws.mount.get() >= 0) {
      r.mechanisms.disk = "tmpfs";
      if (spec.shared_workspace)
        ws.parent.reset(::openat(ws.dir.get(), "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      copy_guard serial(ws);
      unique_fd root(::openat(ws.mount.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (root.get() < 0) throw io_error("open", "workspace tmpfs", errno);
      detail::copy_limits cl;
      cl.chown = drop;
      cl.uid = id.uid;
      cl.gid = id.gid;
      std::string why;
      if (!detail::copy_tree(ws.dir.get(), root.get(), cl, &why))
        throw error("sandbox: workspace '" + ws.path + "' does not fit its budget of " +
                    std::to_string(lim.workspace_bytes) + " bytes / " + std::to_string(lim.workspace_inodes) +
                    " inodes (" + why + ")");
      return;
    }
  }
  // No budget: the command writes the host directory itself. A root caller hands the tree to the
  // sandbox uid, walking it by descriptors so that no link planted by a concurrent run is followed.
  if (drop && !detail::chown_tree(ws.dir.get(), id.uid, id.gid))
    throw error("sandbox: workspace '" + ws.path + "' is deeper than " + std::to_string(detail::kMaxDepth) +
                " levels");
}

// Copies the budget tmpfs back into the host directory after the run (the command is gone by then).
void copy_back(workspace& ws, const limits& lim, run_result& r) {
  copy_guard serial(ws);
  unique_fd root(::openat(ws.mount.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  std::string why;
  bool ok = root.get() >= 0 && detail::remove_contents(ws.dir.get());
  if (ok) {
    detail::copy_limits cl;
    cl.max_bytes = lim.workspace_bytes;  // hard links would otherwise multiply on the host
    ok = detail::copy_tree(root.get(), ws.dir.get(), cl, &why);
  }
  if (!ok && r.error.empty())
    r.error = "workspace copy-back incomplete: " + (why.empty() ? "cannot clear" : why);
}

// Everything the launcher child needs, prepared before clone: the child shares our memory (CLONE_VM)
// and may only make async-signal-safe calls.
struct child_args {
  const char* bwrap = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, seccomp_fd = -1, status_fd = -1, workspace_fd = -1;
  // The budget tmpfs: attached over mount_target in a mount namespace of the launcher's own, so that
  // bwrap can bind it and the host never sees it.
  int mount_fd = -1;
  const char* mount_target = nullptr;
  const char* const* procs_files = nullptr;
  size_t n_procs_files = 0;
  struct rlimit_entry {
    int resource;
    rlim_t soft, hard;
  } rlimits[8];
  size_t n_rlimits = 0;
  bool drop = false;
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t parent = 0;  // moxi: if it is gone by the time PDEATHSIG is armed, the child must not go on
  // Written by the child on failure, read by the parent after the vfork wait.
  const char* failed_step = nullptr;
  int failed_errno = 0;
};

int child_fail(child_args* a, const char* step) {
  a->failed_step = step;
  a->failed_errno = errno;
  _exit(127);
}

int child_main(void* arg) {
  auto* a = static_cast<child_args*>(arg);
  // run() blocks every signal around the clone, so none is handled before the loop below.
  if (::setsid() < 0) return child_fail(a, "setsid");
  // Handlers of the parent must not run on this stack; ignored signals must not stay ignored in bwrap. A
  // signal still pending was sent to moxi's process group before setsid (a terminal's Ctrl-C, a
  // supervisor's group kill): moxi stops the run for it itself, but here, once unblocked, it would kill the
  // launcher before bwrap starts. Setting SIG_IGN discards a pending signal, then SIG_DFL applies.
  struct sigaction dfl, ign;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  ign = dfl;
  ign.sa_handler = SIG_IGN;
  for (int s = 1; s < NSIG; ++s) {
    ::sigaction(s, &ign, nullptr);
    ::sigaction(s, &dfl, nullptr);
  }
  char pid_text[24];
  {
    pid_t pid = ::getpid();
    char rev[24];
    int n = 0;
    do rev[n++] = static_cast<char>('0' + pid % 10);
    while ((pid /= 10) > 0);
    for (int i = 0; i < n; ++i) pid_text[i] = rev[n - 1 - i];
    pid_text[n] = '\n';
    pid_text[n + 1] = 0;
  }
  for (size_t i = 0; i < a->n_procs_files; ++i) {
    int fd = ::open(a->procs_files[i], O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::write(fd, pid_text, ::strlen(pid_text)) < 0) return child_fail(a, "join cgroup");
    ::close(fd);
  }
  for (size_t i = 0; i < a->n_rlimits; ++i) {
    struct rlimit rl = {a->rlimits[i].soft, a->rlimits[i].hard};
    if (::setrlimit(a->rlimits[i].resource, &rl) != 0) return child_fail(a, "setrlimit");
  }
  if (a->mount_fd >= 0) {
    if (::unshare(CLONE_NEWNS) != 0) return child_fail(a, "unshare mount namespace");
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return child_fail(a, "mount slave");
    if (::move_mount(a->mount_fd, "", AT_FDCWD, a->mount_target, MOVE_MOUNT_F_EMPTY_PATH) != 0)
      return child_fail(a, "attach workspace tmpfs");
  }
  // 3: the seccomp filter, 4: bwrap's status reports, 5: the workspace bwrap binds (and then closes).
  if (::dup2(a->stdin_fd, 0) < 0 || ::dup2(a->stdout_fd, 1) < 0 || ::dup2(a->stderr_fd, 2) < 0 ||
      ::dup2(a->seccomp_fd, 3) < 0 || ::dup2(a->status_fd, 4) < 0 || ::dup2(a->workspace_fd, 5) < 0)
    return child_fail(a, "dup2");
  // Nothing else of ours crosses into the sandbox (bwrap passes every open fd on to the command; the
  // child it forks closes the status fd first, and the workspace fd is closed once bound).
  if (::syscall(SYS_close_range, 6u, ~0u, 0u) != 0) return child_fail(a, "close_range");
  if (a->drop) {
    // Raw syscalls: only this process changes identity, without glibc's all-threads machinery.
    if (::syscall(SYS_setgroups, 0, nullptr) != 0) return child_fail(a, "setgroups");
    if (::syscall(SYS_setresgid, a->gid, a->gid, a->gid) != 0) return child_fail(a, "setresgid");
    if (::syscall(SYS_setresuid, a->uid, a->uid, a->uid) != 0) return child_fail(a, "setresuid");
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return child_fail(a, "no_new_privs");
  // After the uid change, which clears it: if moxi dies, bwrap dies, and with it the whole tree.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return child_fail(a, "pdeathsig");
  // The calling thread waits (CLONE_VFORK), but another thread may end moxi meanwhile (a fatal signal):
  // a parent that died before the line above sends no signal, and bwrap would run with nobody to stop it.
  if (::getppid() != a->parent) _exit(127);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execve(a->bwrap, a->argv, a->envp);
  return child_fail(a, "exec bwrap");
}

// One captured stream: keeps the first `cap` bytes, counts and hashes everything.
struct stream_reader {
  int fd = -1;
  size_t cap = 0;
  captured_stream* out = nullptr;
  XXH3_state_t* hash = XXH3_createState();
  stream_reader() { XXH3_64bits_reset(hash); }
  ~stream_reader() {
    if (fd >= 0) ::close(fd);
    XXH3_freeState(hash);
  }
  // Reads what is there without blocking; returns false at EOF.
  bool drain() {
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        out->bytes += static_cast<uint64_t>(n);
        XXH3_64bits_update(hash, buf, static_cast<size_t>(n));
        size_t room = cap > out->data.size() ? cap - out->data.size() : 0;
        size_t take = std::min(room, static_cast<size_t>(n));
        out->data.append(buf, take);
        if (take < static_cast<size_t>(n)) out->truncated = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return true;
      close();
      return false;
    }
  }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
    out->xxh3 = XXH3_64bits_digest(hash);
  }
};

std::vector<std::string> bwrap_arguments(const run_spec& spec) {
  const auto& pol = spec.policy;
  std::vector<std::string> a = {"bwrap",
                                "--unshare-user",
                                "--unshare-pid",
                                "--unshare-net",
                                "--unshare-ipc",
                                "--unshare-uts",
                                "--unshare-cgroup-try",
                                "--disable-userns",
                                "--die-with-parent",
                                "--new-session",
                                "--cap-drop",
                                "ALL",
                                "--hostname",
                                "moxi-sandbox"};
  for (const auto& e : system_view()) {
    if (e.link_target.empty())
      a.insert(a.end(), {"--ro-bind", e.path, e.path});
    else
      a.insert(a.end(), {"--symlink", e.link_target, e.path});
  }
  for (const auto& [host, inside] : pol.ro_binds) a.insert(a.end(), {"--ro-bind", host, inside});
  // /dev is a tmpfs of bwrap's with the device nodes bound in: its /dev/shm gets a sized tmpfs of its
  // own and /dev itself turns read-only, so that neither is an unbudgeted writable place.
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev"});
  a.insert(a.end(),
           {"--size", std::to_string(spec.limits.shm_bytes), "--perms", "1777", "--tmpfs", "/dev/shm"});
  a.insert(a.end(), {"--size", std::to_string(spec.limits.tmp_bytes), "--tmpfs", "/tmp"});
  // The workspace by descriptor: bwrap checks that what it mounted is the directory we opened.
  a.insert(a.end(), {"--bind-fd", "5", pol.workspace_mount, "--chdir", pol.workspace_mount});
  // The root tmpfs bwrap builds on would otherwise be a second writable place.
  a.insert(a.end(), {"--remount-ro", "/dev", "--remount-ro", "/", "--clearenv"});
  std::map<std::string, std::string> env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
                                            {"HOME", pol.workspace_mount},
                                            {"TMPDIR", "/tmp"},
                                            {"LANG", "C.UTF-8"},
                                            {"TERM", "dumb"}};
  for (const auto& [k, v] : spec.env) env[k] = v;
  for (const auto& [k, v] : env) a.insert(a.end(), {"--setenv", k, v});
  // bwrap writes {"exit-code": N} here only once its exec of the command succeeded: the record of
  // whether the command ran, on a descriptor the command never holds.
  a.insert(a.end(), {"--json-status-fd", "4", "--seccomp", "3", "--"});
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  return a;
}

}  // namespace

namespace {

constexpr double kMaxSeconds = 1e6;                          // ~11.6 days: timeout_s and cpu_s
constexpr uint64_t kMaxBytes = 1ull << 50;                   // 1 PiB: memory and file size
constexpr uint64_t kMaxTmpfs = 1ull << 40;                   // 1 TiB: tmp, shm, workspace
constexpr uint64_t kMaxOutput = 1ull << 30;                  // captured in memory, per stream
constexpr uint32_t kMaxPids = (1u << 22) - kBwrapProcesses;  // with bwrap's two: PID_MAX_LIMIT
constexpr uint32_t kMaxOpenFiles = 1u << 20;                 // the kernel's default fs.nr_open

[[noreturn]] void out_of_range(const char* field, const std::string& value, const std::string& range) {
  throw error(std::string("sandbox: limits.") + field + " = " + value + " is out of range (" + range + ")");
}

void check_seconds(const char* field, double v, bool zero_ok) {
  if (!std::isfinite(v) || v < 0 || (!zero_ok && v == 0) || v > kMaxSeconds)
    out_of_range(field, std::to_string(v),
                 std::string(zero_ok ? "0 = none, or " : "") + "> 0 and <= 1e6 seconds");
}

void check_count(const char* field, uint64_t v, uint64_t lo, uint64_t hi, bool zero_ok, const char* unit) {
  if ((v == 0 && zero_ok) || (v >= lo && v <= hi)) return;
  out_of_range(field, std::to_string(v),
               std::string(zero_ok ? "0 = none, or " : "") + std::to_string(lo) + ".." + std::to_string(hi) +
                   " " + unit);
}

}  // namespace

void check_limits(const limits& l) {
  check_seconds("timeout_s", l.timeout_s, false);
  check_seconds("cpu_s", l.cpu_s, true);
  check_count("memory_bytes", l.memory_bytes, 1ull << 20, kMaxBytes, true, "bytes");
  check_count("pids", l.pids, 1, kMaxPids, true, "processes");
  check_count("file_size_bytes", l.file_size_bytes, 1, kMaxBytes, true, "bytes");
  check_count("output_bytes", l.output_bytes, 0, kMaxOutput, true, "bytes");
  check_count("open_files", l.open_files, 16, kMaxOpenFiles, false, "descriptors");
  check_count("tmp_bytes", l.tmp_bytes, 4096, kMaxTmpfs, false, "bytes");
  check_count("shm_bytes", l.shm_bytes, 4096, kMaxTmpfs, false, "bytes");
  check_count("workspace_bytes", l.workspace_bytes, 4096, kMaxTmpfs, true, "bytes");
  check_count("workspace_inodes", l.workspace_inodes, 16, 1ull << 32, false, "inodes");
}

void check_workspace_mount(const std::string& m) {
  // Absolute, normal, and not a system directory the sandbox's own tools live in: a Terminal-Bench task's
  // WORKDIR (/app) is fine, `/`, `/usr` or `/a/../b` are not.
  static const std::vector<std::string> system = {"/bin",  "/dev",  "/etc", "/lib", "/lib32", "/lib64",
                                                  "/proc", "/sbin", "/sys", "/tmp", "/usr"};
  bool ok = m.size() > 1 && m[0] == '/' && m.back() != '/' && m.find("//") == std::string::npos &&
            m.find('\0') == std::string::npos;
  for (const char* bad : {"/./", "/../"}) ok = ok && (m + "/").find(bad) == std::string::npos;
  for (const auto& s : system) ok = ok && m != s && m.rfind(s + "/", 0) != 0;
  if (!ok)
    throw error(
        "sandbox: workspace mount '" + m +
        "' must be an absolute, normal path outside /bin, /dev, /etc, /lib*, /proc, /sbin, /sys, /tmp, /usr");
}

void check_policy(const policy& p) {
  if (p.uid == 0 || p.uid == static_cast<uid_t>(-1))
    throw error("sandbox: policy.uid must not be root or -1");
  if (p.gid == 0 || p.gid == static_cast<gid_t>(-1))
    throw error("sandbox: policy.gid must not be root or -1");
  if (p.uid_pool_size == 0) return;
  const uint64_t first = p.uid_pool_first, end = first + p.uid_pool_size;  // one past the last
  if (first == 0 || end > static_cast<uid_t>(-1))
    throw error("sandbox: policy.uid_pool_first/uid_pool_size must lie within 1 .. 2^32-2");
  if (p.uid >= first && p.uid < end) throw error("sandbox: policy.uid must lie outside the uid pool");
}

run_result run(const run_spec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) throw error("sandbox: empty command");
  const auto& lim = spec.limits;
  check_limits(lim);
  check_workspace_mount(spec.policy.workspace_mount);
  check_policy(spec.policy);
  check_interrupt();  // nothing new starts once moxi is asked to stop (a pool's queued runs end here)
  static std::once_flag swept;
  std::call_once(swept, [] {
    sweep_stale_cgroups();
    // Orphans of our descendants come to us, not to the host's init: the sandbox's PID 1 is one, once
    // bwrap's outer process exits (sandbox_init::reap).
    ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  });
  run_result r;
  const std::string bwrap = bwrap_path();
  const identity id = run_identity(spec);  // held until the run, and every process of it, is over
  const bool drop = id.drop;
  r.uid = id.uid;

  workspace ws;
  prepare_workspace(spec, id, ws, r);
  r.workspace = ws.path;
  // The clock starts here: preparing the workspace (copying, handing over) is not the command's time.
  auto t0 = clock_type::now();

  auto cg = lim.use_cgroup
                ? std::make_unique<run_cgroup>(lim.memory_bytes, lim.pids ? lim.pids + kBwrapProcesses : 0)
                : std::make_unique<run_cgroup>();
  r.cgroup = cg->path();
  r.mechanisms.memory = cg->memory() ? cg->mechanism() : (lim.memory_bytes ? "rlimit" : "none");
  // RLIMIT_NPROC is per uid: meaningful only for the dedicated sandbox uid, i.e. when we drop to it.
  r.mechanisms.pids = cg->pids() ? cg->mechanism() : (lim.pids && drop ? "rlimit" : "none");
  r.mechanisms.cpu = cg->cpu() && lim.cpu_s > 0 ? cg->mechanism() : (lim.cpu_s > 0 ? "rlimit" : "none");

  // stdin: a memfd holding the data (a regular file never blocks either side), else /dev/null.
  fd_guard in_fd;
  if (spec.stdin_data.empty()) {
    in_fd.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  } else {
    in_fd.reset(::memfd_create("moxi-stdin", MFD_CLOEXEC));
    if (in_fd.get() >= 0 && ::pwrite(in_fd.get(), spec.stdin_data.data(), spec.stdin_data.size(), 0) !=
                                static_cast<ssize_t>(spec.stdin_data.size()))
      throw io_error("write", "sandbox stdin", errno);
  }
  if (in_fd.get() < 0) throw io_error("open", "sandbox stdin", errno);
  in_fd.reset(high_fd(dup(in_fd.get())));
  fd_guard seccomp_fd(high_fd(seccomp_bpf_memfd(spec.policy.allow_inet)));
  int status_pipe[2];
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) throw io_error("pipe", "sandbox status", errno);
  fd_guard status_r(status_pipe[0]), status_w(high_fd(status_pipe[1]));
  fd_guard ws_fd(high_fd(::fcntl(ws.mount.get() >= 0 ? ws.mount.get() : ws.dir.get(), F_DUPFD_CLOEXEC, 0)));

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw io_error("pipe", "sandbox stdout", errno);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw io_error("pipe", "sandbox stderr", e);
  }
  stream_reader out_reader, err_reader;
  out_reader.fd = out_pipe[0];
  err_reader.fd = err_pipe[0];
  out_reader.out = &r.out;
  err_reader.out = &r.err;
  out_reader.cap = err_reader.cap = static_cast<size_t>(lim.output_bytes);
  ::fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  fd_guard out_w(high_fd(out_pipe[1])), err_w(high_fd(err_pipe[1]));

  // argv/envp/paths as C arrays owned here for the child's lifetime.
  std::vector<std::string> args = bwrap_arguments(spec);
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  char* envp[] = {nullptr};
  std::vector<const char*> procs;
  for (const auto& f : cg->procs_files()) procs.push_back(f.c_str());

  child_args ca;
  ca.bwrap = bwrap.c_str();
  ca.argv = argv.data();
  ca.envp = envp;
  ca.stdin_fd = in_fd.get();
  ca.stdout_fd = out_w.get();
  ca.stderr_fd = err_w.get();
  ca.seccomp_fd = seccomp_fd.get();
  ca.status_fd = status_w.get();
  ca.workspace_fd = ws_fd.get();
  if (ws.mount.get() >= 0) {
    ca.mount_fd = ws_fd.get();
    ca.mount_target = ws.path.c_str();
  }
  ca.procs_files = procs.data();
  ca.n_procs_files = procs.size();
  auto add_rlimit = [&](int res, rlim_t soft, rlim_t hard) {
    ca.rlimits[ca.n_rlimits++] = {res, soft, hard};
  };
  add_rlimit(RLIMIT_CORE, 0, 0);
  add_rlimit(RLIMIT_NOFILE, lim.open_files, lim.open_files);
  if (lim.file_size_bytes) add_rlimit(RLIMIT_FSIZE, lim.file_size_bytes, lim.file_size_bytes);
  if (lim.cpu_s > 0) {
    // Per process; the soft limit sends SIGXCPU, the hard one a second later SIGKILL.
    rlim_t s = static_cast<rlim_t>(std::ceil(lim.cpu_s));
    add_rlimit(RLIMIT_CPU, s, s + 1);
  }
  if (lim.memory_bytes && !cg->memory()) add_rlimit(RLIMIT_AS, lim.memory_bytes, lim.memory_bytes);
  // RLIMIT_NPROC counts every process of the uid, so it is only a fallback and only for the sandbox uid.
  if (lim.pids && !cg->pids() && drop)
    add_rlimit(RLIMIT_NPROC, lim.pids + kBwrapProcesses, lim.pids + kBwrapProcesses);
  ca.drop = drop;
  ca.uid = id.uid;
  ca.gid = id.gid;
  ca.parent = ::getpid();

  constexpr size_t kStack = 256 * 1024;
  void* stack =
      ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) throw io_error("mmap", "launcher stack", errno);
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  // CLONE_VFORK: we resume once the child has exec'd bwrap or failed, so `ca` is stable and its error
  // fields are final when we look at them.
  pid_t pid = ::clone(child_main, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &ca);
  int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kStack);
  if (pid < 0) throw io_error("clone", "sandbox launcher", clone_errno);
  out_w.reset();
  err_w.reset();
  in_fd.reset();
  seccomp_fd.reset();
  status_w.reset();
  ws_fd.reset();

  int status = 0;
  struct rusage ru = {};
  if (ca.failed_step) {
    ::wait4(pid, &status, 0, &ru);
    r.error =
        std::string("sandbox launch failed at ") + ca.failed_step + ": " + std::strerror(ca.failed_errno);
    r.duration_s = seconds_since(t0);
    if (!spec.audit_log.empty()) append_audit(spec.audit_log, audit_record(spec, r));
    return r;
  }
  // The budget: a full tmpfs (no free block or inode) ends the run; fstatfs costs no walk.
  auto disk_full = [&] {
    struct statfs sf;
    return ws.mount.get() >= 0 && ::fstatfs(ws.mount.get(), &sf) == 0 && (sf.f_bfree == 0 || sf.f_ffree == 0);
  };
  const bool watch_disk = ws.mount.get() >= 0;

  fd_guard pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  const auto deadline =
      t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(lim.timeout_s));
  const bool cpu_by_cgroup = lim.cpu_s > 0 && cg->cpu();
  // bwrap's reports, read as they come: {"child-pid": N} (the sandbox's PID 1, by its host pid) right
  // after bwrap made it, {"exit-code": N} once the command ran.
  std::string status_text;
  ::fcntl(status_r.get(), F_SETFL, O_NONBLOCK);
  // Returns false at EOF (or once the text is implausibly long).
  auto read_status = [&] {
    char buf[4096];
    for (;;) {
      if (status_text.size() >= 65536) return false;
      const ssize_t n = ::read(status_r.get(), buf, sizeof buf);
      if (n > 0) {
        status_text.append(buf, static_cast<size_t>(n));
        continue;
      }
      return n < 0 && (errno == EAGAIN || errno == EINTR);
    }
  };
  bool status_open = true;
  sandbox_init init;
  bool exited = false;
  clock_type::time_point exited_at;
  limit_kind killed_for = limit_kind::none;
  bool stopping = false, init_killed = false, hard_killed = false, interrupted_run = false;
  clock_type::time_point stop_at;
  // Ends the tree. Killing the sandbox's PID 1 makes the kernel kill everything in its PID namespace
  // before PID 1 itself exits; bwrap's outer process then reaps it and exits, so nothing is orphaned.
  // Killing bwrap (our child) and the cgroup is the fallback when PID 1 is not known, or not gone after
  // a grace.
  auto stop_tree = [&] {
    const auto now = clock_type::now();
    if (!stopping) {
      stopping = true;
      stop_at = now;
    }
    if (!init_killed && init.known() && !init.failed) init_killed = init.kill();
    if (!hard_killed && (now - stop_at > std::chrono::seconds(1) || (!init_killed && init.failed))) {
      hard_killed = true;
      ::kill(pid, SIGKILL);  // our unreaped child: its pid cannot have been reused
      cg->kill_all(500);
    }
  };
  auto kill_tree = [&](limit_kind why) {
    if (killed_for == limit_kind::none) killed_for = why;
    stop_tree();
  };
  const int stop_fd = interrupt_fd();
  for (;;) {
    if (!exited) {
      // Before the reap: while bwrap is unreaped, a child of it is the sandbox's PID 1 and nothing else.
      if (status_open) status_open = read_status();
      if (!init.known() && !init.failed) init.find(status_text, pid);
      int wr = ::wait4(pid, &status, WNOHANG, &ru);
      if (wr == pid) {
        exited = true;
        exited_at = clock_type::now();
      }
    }
    bool pipes_open = out_reader.fd >= 0 || err_reader.fd >= 0;
    if (exited && !pipes_open) break;
    auto now = clock_type::now();
    if (!exited && now >= deadline) kill_tree(limit_kind::timeout);
    if (!exited && cpu_by_cgroup && cg->cpu_seconds() >= lim.cpu_s) kill_tree(limit_kind::cpu);
    if (!exited && watch_disk && disk_full()) kill_tree(limit_kind::disk);
    if (!exited && !interrupted_run && interrupt_requested()) {
      interrupted_run = true;
      stop_tree();
    }
    if (!exited && stopping) stop_tree();  // PID 1 became known, or the grace is over
    // After the exit every writer is dead (the PID namespace is gone); a short grace covers the last
    // bytes in flight, then we stop rather than hang on a descriptor leaked to some other process.
    if (exited && now - exited_at > std::chrono::milliseconds(500)) break;
    int wait_ms = 100;
    if (!exited) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
      wait_ms = static_cast<int>(std::clamp<long long>(left, 1, cpu_by_cgroup || watch_disk ? 20 : 1000));
      if (stopping) wait_ms = std::min(wait_ms, 5);
    } else {
      wait_ms = 10;
    }
    pollfd fds[5];
    nfds_t n = 0;
    if (!exited && status_open && !init.known()) fds[n++] = {status_r.get(), POLLIN, 0};
    if (out_reader.fd >= 0) fds[n++] = {out_reader.fd, POLLIN, 0};
    if (err_reader.fd >= 0) fds[n++] = {err_reader.fd, POLLIN, 0};
    if (!exited && pidfd.get() >= 0) fds[n++] = {pidfd.get(), POLLIN, 0};
    if (!exited && !interrupted_run && stop_fd >= 0) fds[n++] = {stop_fd, POLLIN, 0};
    ::poll(fds, n, wait_ms);
    if (out_reader.fd >= 0) out_reader.drain();
    if (err_reader.fd >= 0) err_reader.drain();
  }
  if (out_reader.fd >= 0) out_reader.close();
  if (err_reader.fd >= 0) err_reader.close();
  if (!exited) ::wait4(pid, &status, 0, &ru);
  r.duration_s = seconds_since(t0);
  if (status_open) read_status();
  // bwrap's outer process may exit before the sandbox's PID 1 is gone (it leaves as soon as PID 1
  // reports the command's status): the run is over only when PID 1, and with it the namespace, is.
  // A short command can end, and bwrap with it, before the loop read the pid: find PID 1 now.
  if (!init.known() && !init.failed) init.find(status_text, pid);
  init.wait_gone();
  init.reap();

  // Stragglers cannot exist with a PID namespace, but the cgroup is checked and emptied before its
  // counters are read and it is removed.
  if (!cg->wait_empty(200)) cg->kill_all(1000);

  if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
    r.exit_code = 128 + r.signal;
  } else {
    r.exit_code = WEXITSTATUS(status);
    // bwrap reports a command killed by signal N as exit status 128+N.
    if (r.exit_code > 128 && r.exit_code < 128 + NSIG) r.signal = r.exit_code - 128;
  }
  double rusage_cpu =
      ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
  r.cpu_s = cg->cpu() ? cg->cpu_seconds() : rusage_cpu;
  r.peak_memory_bytes = cg->memory() ? cg->peak_memory_bytes() : static_cast<uint64_t>(ru.ru_maxrss) * 1024;

  if (interrupted_run) {
    // Stopped because moxi is asked to stop: the tree is gone; the cgroup and a temporary workspace go
    // on the way out (a given workspace keeps what it held before the run: no copy back).
    r.error = interrupted(interrupt_signal()).what();
    cg.reset();
    if (!spec.audit_log.empty()) append_audit(spec.audit_log, audit_record(spec, r));
    throw interrupted(interrupt_signal());
  }

  // Whether the command ran comes from bwrap's status descriptor, never from what the command printed:
  // "exit-code" is reported only after a successful exec. A run we killed has no report; it started
  // if bwrap had at least created the sandbox's processes.
  r.started = status_text.find("\"exit-code\"") != std::string::npos ||
              (killed_for != limit_kind::none && status_text.find("\"child-pid\"") != std::string::npos);
  if (!r.started) {
    const std::string first = r.err.data.substr(0, r.err.data.find('\n'));
    r.error = "sandbox setup failed: " +
              (first.empty() ? "bwrap exited with status " + std::to_string(r.exit_code) : first);
  }

  // Which limit ended the run, then every limit that was reached.
  if (killed_for != limit_kind::none) {
    r.fired = killed_for;

  } else if (cg->memory_oom_killed()) {
    r.fired = limit_kind::memory;
  } else if (r.signal == SIGXFSZ) {
    r.fired = limit_kind::file_size;
  } else if (lim.cpu_s > 0 &&
             (r.signal == SIGXCPU || (r.signal == SIGKILL && r.cpu_s >= std::ceil(lim.cpu_s)))) {
    r.fired = limit_kind::cpu;
  }
  if (r.fired != limit_kind::none) r.hit.push_back(r.fired);
  auto add_hit = [&](limit_kind k) {
    if (!r.hit_limit(k)) r.hit.push_back(k);
  };
  if (cg->memory_limit_reached()) add_hit(limit_kind::memory);
  if (cg->pids_limit_reached()) add_hit(limit_kind::pids);
  if (disk_full()) add_hit(limit_kind::disk);  // filled the budget, then exited before the next check
  if (r.out.truncated || r.err.truncated) add_hit(limit_kind::output);

  cg.reset();  // removes the group (after a last kill of anything left)
  // The command's writes go back to the host directory (not for a temporary one about to be removed).
  if (ws.mount.get() >= 0 && (!ws.temporary || ws.keep)) copy_back(ws, lim, r);
  if (!spec.audit_log.empty()) append_audit(spec.audit_log, audit_record(spec, r));
  return r;
}

}  // namespace moxi::sandbox
