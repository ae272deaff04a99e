// sandbox::run: launches one command under bubblewrap with moxi's policy and enforces the limits.
//
// Process layout: moxi --clone(VM|VFORK)--> launcher child (setsid, join cgroup, rlimits, fds 0-3 only,
// drop to the sandbox uid when root, no_new_privs) --exec--> bwrap (outer monitor) --> bwrap as PID 1 of
// the new PID namespace --> the command. Killing the outer bwrap kills PID 1 (--die-with-parent), and the
// death of PID 1 makes the kernel kill every process left in the namespace, so the whole tree goes with
// it whether or not a cgroup is available. The seccomp filter is compiled here and handed to bwrap as a
// sealed memfd (--seccomp 3); bwrap installs it in the command's process right before exec.
#include <fcntl.h>
#include <ftw.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
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
#include "moxi/sandbox/audit-log.h"
#include "moxi/sandbox/cgroup.h"
#include "moxi/sandbox/sandbox.h"
#include "moxi/sandbox/seccomp-policy.h"

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

// Host directories a workspace must never be: handing them to the sandbox uid would break the host.
bool is_system_path(const std::string& real) {
  if (real == "/") return true;
  for (const char* p : {"/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot",
                        "/proc", "/sys", "/dev", "/run", "/var", "/root", "/home"}) {
    std::string s = p;
    if (real == s || real.rfind(s + "/", 0) == 0) {
      // Subdirectories of /home, /root and /var are ordinary places for a workspace; the roots are not.
      if (real != s && (s == "/home" || s == "/root" || s == "/var")) return false;
      return true;
    }
  }
  return false;
}

uid_t g_chown_uid;
gid_t g_chown_gid;
int chown_entry(const char* path, const struct stat*, int, struct FTW*) {
  // lchown: a symlink planted in the workspace must not hand its target to the sandbox uid.
  ::lchown(path, g_chown_uid, g_chown_gid);
  return 0;
}

struct workspace {
  std::string path;
  bool temporary = false;
  bool keep = false;
  ~workspace() {
    if (temporary && !keep && !path.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  }
};

void prepare_workspace(const run_spec& spec, bool drop, workspace& ws) {
  if (spec.workspace.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/moxi-ws-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw io_error("create temporary workspace", tmpl, errno);
    ws.path = tmpl;
    ws.temporary = true;
    ws.keep = spec.keep_workspace;
  } else {
    std::error_code ec;
    // Checked before anything is created, through any symlinks in the part that exists already.
    std::string planned =
        std::filesystem::weakly_canonical(std::filesystem::absolute(spec.workspace), ec).string();
    if (ec || is_system_path(planned))
      throw error("sandbox: refusing workspace '" + spec.workspace + "': it is a system directory");
    std::filesystem::create_directories(spec.workspace, ec);
    if (!std::filesystem::is_directory(spec.workspace))
      throw error("sandbox: workspace '" + spec.workspace + "' is not a directory and cannot be created");
    ws.path = std::filesystem::canonical(spec.workspace).string();
  }
  if (is_system_path(ws.path))
    throw error("sandbox: refusing workspace '" + ws.path + "': it is a system directory");
  if (!drop) return;
  // bwrap runs as the sandbox uid and must be able to reach the workspace to bind it.
  std::filesystem::path p(ws.path);
  for (auto dir = p.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0 && !(st.st_mode & S_IXOTH) && st.st_uid != spec.policy.uid)
      throw error("sandbox: workspace '" + ws.path + "' is not reachable by the sandbox uid " +
                  std::to_string(spec.policy.uid) + " because '" + dir.string() +
                  "' is not world-searchable; use a directory under /tmp");
    if (dir == dir.root_path()) break;
  }
  g_chown_uid = spec.policy.uid;
  g_chown_gid = spec.policy.gid;
  static std::mutex chown_mutex;  // nftw's callback has no user pointer
  std::lock_guard<std::mutex> lock(chown_mutex);
  if (::nftw(ws.path.c_str(), chown_entry, 32, FTW_PHYS | FTW_MOUNT) != 0)
    throw io_error("hand over workspace", ws.path, errno);
}

// Everything the launcher child needs, prepared before clone: the child shares our memory (CLONE_VM)
// and may only make async-signal-safe calls.
struct child_args {
  const char* bwrap = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1, seccomp_fd = -1;
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
  // Handlers of the parent must not run on this stack; ignored signals must not stay ignored in bwrap.
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) ::sigaction(s, &dfl, nullptr);
  if (::setsid() < 0) return child_fail(a, "setsid");
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
  if (::dup2(a->stdin_fd, 0) < 0 || ::dup2(a->stdout_fd, 1) < 0 || ::dup2(a->stderr_fd, 2) < 0 ||
      ::dup2(a->seccomp_fd, 3) < 0)
    return child_fail(a, "dup2");
  // Nothing else of ours crosses into the sandbox (bwrap passes every open fd on to the command).
  if (::syscall(SYS_close_range, 4u, ~0u, 0u) != 0) return child_fail(a, "close_range");
  if (a->drop) {
    // Raw syscalls: only this process changes identity, without glibc's all-threads machinery.
    if (::syscall(SYS_setgroups, 0, nullptr) != 0) return child_fail(a, "setgroups");
    if (::syscall(SYS_setresgid, a->gid, a->gid, a->gid) != 0) return child_fail(a, "setresgid");
    if (::syscall(SYS_setresuid, a->uid, a->uid, a->uid) != 0) return child_fail(a, "setresuid");
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return child_fail(a, "no_new_privs");
  // After the uid change, which clears it: if moxi dies, bwrap dies, and with it the whole tree.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return child_fail(a, "pdeathsig");
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

std::vector<std::string> bwrap_arguments(const run_spec& spec, const std::string& ws) {
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
  a.insert(a.end(), {"--proc", "/proc", "--dev", "/dev"});
  if (spec.limits.tmp_bytes) a.insert(a.end(), {"--size", std::to_string(spec.limits.tmp_bytes)});
  a.insert(a.end(), {"--tmpfs", "/tmp", "--bind", ws, pol.workspace_mount, "--chdir", pol.workspace_mount});
  // The root tmpfs bwrap builds on would otherwise be a second writable place.
  a.insert(a.end(), {"--remount-ro", "/", "--clearenv"});
  std::map<std::string, std::string> env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"},
                                            {"HOME", pol.workspace_mount},
                                            {"TMPDIR", "/tmp"},
                                            {"LANG", "C.UTF-8"},
                                            {"TERM", "dumb"}};
  for (const auto& [k, v] : spec.env) env[k] = v;
  for (const auto& [k, v] : env) a.insert(a.end(), {"--setenv", k, v});
  a.insert(a.end(), {"--seccomp", "3", "--"});
  a.insert(a.end(), spec.argv.begin(), spec.argv.end());
  return a;
}

}  // namespace

run_result run(const run_spec& spec) {
  if (spec.argv.empty() || spec.argv[0].empty()) throw error("sandbox: empty command");
  const auto& lim = spec.limits;
  if (!(lim.timeout_s > 0)) throw error("sandbox: timeout must be > 0 seconds");
  auto t0 = clock_type::now();
  run_result r;
  const bool drop = ::geteuid() == 0;
  const std::string bwrap = bwrap_path();

  workspace ws;
  prepare_workspace(spec, drop, ws);
  r.workspace = ws.path;

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
  std::vector<std::string> args = bwrap_arguments(spec, ws.path);
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
  ca.uid = spec.policy.uid;
  ca.gid = spec.policy.gid;

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

  fd_guard pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  const auto deadline =
      t0 + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(lim.timeout_s));
  const bool cpu_by_cgroup = lim.cpu_s > 0 && cg->cpu();
  bool exited = false;
  clock_type::time_point exited_at;
  limit_kind killed_for = limit_kind::none;
  auto kill_tree = [&](limit_kind why) {
    if (killed_for != limit_kind::none) return;
    killed_for = why;
    ::kill(pid, SIGKILL);  // our unreaped child: its pid cannot have been reused
    cg->kill_all(500);
  };
  for (;;) {
    if (!exited) {
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
    // After the exit every writer is dead (the PID namespace is gone); a short grace covers the last
    // bytes in flight, then we stop rather than hang on a descriptor leaked to some other process.
    if (exited && now - exited_at > std::chrono::milliseconds(500)) break;
    int wait_ms = 100;
    if (!exited) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
      wait_ms = static_cast<int>(std::clamp<long long>(left, 1, cpu_by_cgroup ? 20 : 1000));
      if (killed_for != limit_kind::none) wait_ms = 5;
    } else {
      wait_ms = 10;
    }
    pollfd fds[3];
    nfds_t n = 0;
    if (out_reader.fd >= 0) fds[n++] = {out_reader.fd, POLLIN, 0};
    if (err_reader.fd >= 0) fds[n++] = {err_reader.fd, POLLIN, 0};
    if (!exited && pidfd.get() >= 0) fds[n++] = {pidfd.get(), POLLIN, 0};
    ::poll(fds, n, wait_ms);
    if (out_reader.fd >= 0) out_reader.drain();
    if (err_reader.fd >= 0) err_reader.drain();
  }
  if (out_reader.fd >= 0) out_reader.close();
  if (err_reader.fd >= 0) err_reader.close();
  if (!exited) ::wait4(pid, &status, 0, &ru);
  r.duration_s = seconds_since(t0);

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

  // bwrap's own setup failures exit 1 with "bwrap: ..." before the command ever ran.
  r.started = !(r.exit_code == 1 && r.err.data.rfind("bwrap: ", 0) == 0 && killed_for == limit_kind::none);
  if (!r.started) r.error = "sandbox setup failed: " + r.err.data.substr(0, r.err.data.find('\n'));

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
  if (r.out.truncated || r.err.truncated) add_hit(limit_kind::output);

  cg.reset();  // removes the group (after a last kill of anything left)
  if (!spec.audit_log.empty()) append_audit(spec.audit_log, audit_record(spec, r));
  return r;
}

}  // namespace moxi::sandbox
