// moxi-sandbox-probe: a small program the sandbox test suite runs *inside* the sandbox to attempt one
// escape or fault at a time and report the outcome as `key=value` lines (errno names, not prose), so that
// each test can assert the exact reason an attempt failed.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pty.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char* errno_name(int e) {
  switch (e) {
    case 0:
      return "OK";
    case EPERM:
      return "EPERM";
    case ENOENT:
      return "ENOENT";
    case ESRCH:
      return "ESRCH";
    case EACCES:
      return "EACCES";
    case EROFS:
      return "EROFS";
    case EAFNOSUPPORT:
      return "EAFNOSUPPORT";
    case ECONNREFUSED:
      return "ECONNREFUSED";
    case ENETUNREACH:
      return "ENETUNREACH";
    case ENOSYS:
      return "ENOSYS";
    case ENXIO:
      return "ENXIO";
    case EIO:
      return "EIO";
    case EINVAL:
      return "EINVAL";
    case EBADF:
      return "EBADF";
    case ENOTTY:
      return "ENOTTY";
    case EFBIG:
      return "EFBIG";
    case EAGAIN:
      return "EAGAIN";
    case ENOMEM:
      return "ENOMEM";
    case EEXIST:
      return "EEXIST";
    case ENOTDIR:
      return "ENOTDIR";
    default:
      return "OTHER";
  }
}

// Runs `rc` (a syscall result) and prints `key=OK` or `key=<ERRNO>`.
void report(const char* key, long rc) {
  std::printf("%s=%s\n", key, errno_name(rc < 0 ? errno : 0));
  std::fflush(stdout);
}

int cmd_write(const char* path) {
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  report("write", fd);
  if (fd >= 0) ::write(fd, "escaped\n", 8);
  return fd >= 0 ? 0 : 3;
}

int cmd_read(const char* path) {
  int fd = ::open(path, O_RDONLY);
  report("read", fd);
  if (fd < 0) return 3;
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n > 0) std::fwrite(buf, 1, static_cast<size_t>(n), stdout);
  return 0;
}

int cmd_connect(const char* ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  report("socket", fd);
  if (fd < 0) return 3;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  report("connect", ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a));
  return 0;
}

int cmd_sockets() {
  struct {
    const char* name;
    int family, type;
  } cases[] = {{"unix", AF_UNIX, SOCK_STREAM},  {"inet", AF_INET, SOCK_STREAM},
               {"inet6", AF_INET6, SOCK_DGRAM}, {"netlink", AF_NETLINK, SOCK_RAW},
               {"packet", AF_PACKET, SOCK_RAW}, {"vsock", AF_VSOCK, SOCK_STREAM}};
  for (auto& c : cases) report(c.name, ::socket(c.family, c.type, 0));
  // The upper 32 bits of the family register must not matter to the filter (the kernel ignores them).
  report("inet_high_bits", ::syscall(SYS_socket, (1L << 32) | AF_INET, SOCK_STREAM, 0));
  int sv[2];
  report("socketpair_inet", ::socketpair(AF_INET, SOCK_STREAM, 0, sv));
  return 0;
}

int cmd_dns(const char* name) {
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(name, "80", nullptr, &res);
  std::printf("dns=%s\n", rc == 0 ? "RESOLVED" : "FAILED");
  if (res) ::freeaddrinfo(res);
  // A raw UDP query to a public resolver, bypassing libc's configuration.
  int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  report("udp_socket", fd);
  if (fd >= 0) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(53);
    ::inet_pton(AF_INET, "8.8.8.8", &a.sin_addr);
    report("udp_send", ::sendto(fd, "x", 1, 0, reinterpret_cast<sockaddr*>(&a), sizeof a));
  }
  return 0;
}

int cmd_syscalls() {
  report("ptrace_traceme", ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr));
  report("mount", ::mount("none", "/tmp", "tmpfs", 0, nullptr));
  report("umount", ::umount2("/workspace", MNT_DETACH));
  report("unshare_user", ::unshare(CLONE_NEWUSER));
  report("unshare_ns", ::unshare(CLONE_NEWNS));
  report("clone_newuser", ::syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0));
  report("clone3", ::syscall(SYS_clone3, nullptr, 0));
  report("bpf", ::syscall(SYS_bpf, 0, nullptr, 0));
  perf_event_attr pa{};
  pa.size = sizeof pa;
  pa.type = PERF_TYPE_SOFTWARE;
  pa.config = PERF_COUNT_SW_CPU_CLOCK;
  report("perf_event_open", ::syscall(SYS_perf_event_open, &pa, 0, -1, -1, 0));
  report("keyctl", ::syscall(SYS_keyctl, 0 /*KEYCTL_GET_KEYRING_ID*/, -3, 0));
  report("add_key", ::syscall(SYS_add_key, "user", "moxi", "x", 1, -3));
  report("userfaultfd", ::syscall(SYS_userfaultfd, 0));
  report("kexec_load", ::syscall(SYS_kexec_load, 0, 0, nullptr, 0));
  report("init_module", ::syscall(SYS_init_module, nullptr, 0, ""));
  report("io_uring_setup", ::syscall(SYS_io_uring_setup, 1, nullptr));
  report("setns", ::syscall(SYS_setns, 0, 0));
  report("chroot", ::chroot("/tmp"));
  // A fork must still work (the clone filter only refuses namespace flags).
  pid_t p = ::fork();
  if (p == 0) _exit(0);
  report("fork", p);
  if (p > 0) ::waitpid(p, nullptr, 0);
  return 0;
}

int cmd_ptrace(pid_t target) {
  report("ptrace_attach", ::ptrace(PTRACE_ATTACH, target, nullptr, nullptr));
  char buf[8];
  iovec local{buf, sizeof buf}, remote{reinterpret_cast<void*>(0x400000), sizeof buf};
  report("process_vm_readv", ::process_vm_readv(target, &local, 1, &remote, 1, 0));
  report("kill0", ::kill(target, 0));
  std::string proc = "/proc/" + std::to_string(target);
  struct stat st;
  report("proc_entry", ::stat(proc.c_str(), &st));
  // PID 1 of the sandbox is bwrap's reaper, not anything of the host.
  report("ptrace_pid1", ::ptrace(PTRACE_ATTACH, 1, nullptr, nullptr));
  return 0;
}

int cmd_tiocsti() {
  char c = 'X';
  int tty = ::open("/dev/tty", O_RDWR | O_NOCTTY);
  report("open_dev_tty", tty);
  if (tty >= 0) report("tiocsti_dev_tty", ::ioctl(tty, TIOCSTI, &c));
  for (int fd = 0; fd <= 2; ++fd) {
    std::string key = "tiocsti_fd" + std::to_string(fd);
    report(key.c_str(), ::ioctl(fd, TIOCSTI, &c));
  }
  // A terminal of the sandbox's own: the filter refuses TIOCSTI regardless of the target.
  int master = -1, slave = -1;
  report("openpty", ::openpty(&master, &slave, nullptr, nullptr, nullptr));
  if (slave >= 0) report("tiocsti_own_pty", ::ioctl(slave, TIOCSTI, &c));
  // Upper bits of the request register must not let it through either.
  if (slave >= 0) report("tiocsti_high_bits", ::syscall(SYS_ioctl, slave, (1UL << 32) | TIOCSTI, &c));
  std::printf("sid_is_self=%d\n", ::getsid(0) == ::getpid() ? 1 : 0);
  return 0;
}

int cmd_id() {
  std::printf("uid=%d\neuid=%d\ngid=%d\negid=%d\n", ::getuid(), ::geteuid(), ::getgid(), ::getegid());
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  while (f && std::fgets(line, sizeof line, f)) {
    if (!std::strncmp(line, "CapEff:", 7) || !std::strncmp(line, "CapPrm:", 7) ||
        !std::strncmp(line, "CapBnd:", 7) || !std::strncmp(line, "NoNewPrivs:", 11) ||
        !std::strncmp(line, "Seccomp:", 8)) {
      std::string s(line);
      auto colon = s.find(':');
      std::string value = s.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      value.erase(value.find_last_not_of(" \t\n") + 1);
      std::printf("%s=%s\n", s.substr(0, colon).c_str(), value.c_str());
    }
  }
  if (f) std::fclose(f);
  return 0;
}

int cmd_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  int n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  // opendir itself holds one descriptor while counting.
  std::printf("open_fds=%d\n", n - 1);
  return 0;
}

int cmd_procs() {
  DIR* d = ::opendir("/proc");
  int n = 0;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9') ++n;
  ::closedir(d);
  std::printf("visible_pids=%d\n", n);
  FILE* f = std::fopen("/proc/1/cmdline", "r");
  char buf[256] = {0};
  if (f) {
    size_t k = std::fread(buf, 1, sizeof buf - 1, f);
    for (size_t i = 0; i < k; ++i)
      if (!buf[i]) buf[i] = ' ';
    std::fclose(f);
  }
  std::printf("pid1_cmdline=%s\n", buf);
  struct stat st;
  report("sys_class_net", ::stat("/sys/class/net", &st));
  report("sys_fs_cgroup", ::stat("/sys/fs/cgroup", &st));
  report("write_proc_sys", ::open("/proc/sys/kernel/hostname", O_WRONLY));
  report("write_sysrq", ::open("/proc/sysrq-trigger", O_WRONLY));
  report("proc_kcore", ::open("/proc/kcore", O_RDONLY));
  return 0;
}

int cmd_forkbomb() {
  for (;;) {
    ::fork();  // failures (pids limit) are the point: keep trying until killed
  }
}

// Forks n children that sleep s seconds, reports how many forks succeeded, then waits for them.
int cmd_children(int n, double s) {
  int forked = 0;
  for (int i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::usleep(static_cast<useconds_t>(s * 1e6));
      _exit(0);
    }
    if (pid > 0) ++forked;
  }
  std::printf("uid=%d\nforked=%d\n", ::getuid(), forked);
  std::fflush(stdout);
  while (::wait(nullptr) > 0) {
  }
  return 0;
}

int cmd_membomb(long mb) {
  std::vector<char*> blocks;
  for (long i = 0; i < mb; ++i) {
    char* b = static_cast<char*>(std::malloc(1 << 20));
    if (!b) {
      std::printf("malloc_failed_at_mb=%ld\n", i);
      return 4;
    }
    std::memset(b, 1, 1 << 20);
    blocks.push_back(b);
  }
  std::printf("allocated_mb=%ld\n", mb);
  return 0;
}

int cmd_spin() {
  volatile unsigned long x = 0;
  for (;;) x = x + 1;
}

int cmd_ignore_term() {
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGHUP, SIG_IGN);
  std::printf("ignoring\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

// Leaves a detached grandchild behind (double fork + setsid), the classic way to outlive a job.
int cmd_daemon(const char* seconds) {
  pid_t p = ::fork();
  if (p == 0) {
    ::setsid();
    if (::fork() == 0) {
      ::close(1);
      ::close(2);
      ::execl("/bin/sleep", "sleep", seconds, static_cast<char*>(nullptr));
      _exit(1);
    }
    _exit(0);
  }
  ::waitpid(p, nullptr, 0);
  std::printf("daemonized\n");
  return 0;
}

// The workspace race of issue 14/B1: a directory `d` (with files) and a link `l` to TARGET trade places
// (renameat2 RENAME_EXCHANGE) for SECONDS, so that a host-side walk of the workspace that resolves
// paths would sometimes descend through the link into TARGET.
int cmd_swap(const char* target, const char* seconds) {
  // A previous run may have stopped with the two swapped: put them back first.
  struct stat sd, sl;
  if (::lstat("d", &sd) == 0 && S_ISLNK(sd.st_mode) && ::lstat("l", &sl) == 0 && S_ISDIR(sl.st_mode))
    ::syscall(SYS_renameat2, AT_FDCWD, "d", AT_FDCWD, "l", 2 /* RENAME_EXCHANGE */);
  ::mkdir("d", 0755);
  for (int i = 0; i < 256; ++i) {
    std::string f = "d/f" + std::to_string(i);
    int fd = ::open(f.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) ::close(fd);
  }
  ::unlink("l");
  if (::symlink(target, "l") != 0) {
    report("symlink", -1);
    return 3;
  }
  struct timespec t0, now;
  ::clock_gettime(CLOCK_MONOTONIC, &t0);
  const double limit = std::atof(seconds);
  long swaps = 0;
  do {
    if (::syscall(SYS_renameat2, AT_FDCWD, "d", AT_FDCWD, "l", 2 /* RENAME_EXCHANGE */) == 0) ++swaps;
    ::clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) * 1e-9 < limit);
  std::printf("swaps=%ld\n", swaps);
  return 0;
}

int cmd_output(long bytes) {
  std::vector<char> buf(1 << 16, 'o');
  while (bytes > 0) {
    long n = std::min<long>(bytes, static_cast<long>(buf.size()));
    if (::write(1, buf.data(), static_cast<size_t>(n)) != n) return 5;
    bytes -= n;
  }
  return 0;
}

int cmd_fsize(const char* path, long bytes) {
  int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 3;
  std::vector<char> buf(1 << 16, 'f');
  while (bytes > 0) {
    long n = std::min<long>(bytes, static_cast<long>(buf.size()));
    if (::write(fd, buf.data(), static_cast<size_t>(n)) != n) {
      report("fsize_write", -1);
      return 6;
    }
    bytes -= n;
  }
  std::printf("fsize_write=OK\n");
  return 0;
}

int cmd_env() {
  for (char** e = environ; *e; ++e) std::printf("%s\n", *e);
  return 0;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: moxi-sandbox-probe id|fds|procs|env|syscalls|sockets|tiocsti|spin|ignore-term|forkbomb\n"
      "       | write PATH | read PATH | connect IP PORT | dns NAME | ptrace PID | membomb MB\n"
      "       | daemon SECONDS | output BYTES | fsize PATH BYTES | swap TARGET SECONDS\n"
      "       | children N SECONDS\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  std::string c = argv[1];
  if (c == "id") return cmd_id();
  if (c == "fds") return cmd_fds();
  if (c == "procs") return cmd_procs();
  if (c == "env") return cmd_env();
  if (c == "syscalls") return cmd_syscalls();
  if (c == "sockets") return cmd_sockets();
  if (c == "tiocsti") return cmd_tiocsti();
  if (c == "spin") return cmd_spin();
  if (c == "ignore-term") return cmd_ignore_term();
  if (c == "forkbomb") return cmd_forkbomb();
  if (argc < 3) return usage();
  if (c == "write") return cmd_write(argv[2]);
  if (c == "read") return cmd_read(argv[2]);
  if (c == "dns") return cmd_dns(argv[2]);
  if (c == "ptrace") return cmd_ptrace(std::atoi(argv[2]));
  if (c == "membomb") return cmd_membomb(std::atol(argv[2]));
  if (c == "daemon") return cmd_daemon(argv[2]);
  if (c == "output") return cmd_output(std::atol(argv[2]));
  if (argc < 4) return usage();
  if (c == "connect") return cmd_connect(argv[2], std::atoi(argv[3]));
  if (c == "fsize") return cmd_fsize(argv[2], std::atol(argv[3]));
  if (c == "swap") return cmd_swap(argv[2], argv[3]);
  if (c == "children") return cmd_children(std::atoi(argv[2]), std::atof(argv[3]));
  return usage();
}
