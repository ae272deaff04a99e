// moxi's seccomp policy. Default-allow with a deny list: the namespaces already take away the host view,
// this filter removes the kernel interfaces that are the usual escalation and escape routes (debugging
// other processes, mounting, loading code into the kernel, keyrings, userfaultfd races, io_uring, new
// namespaces) and every socket family except AF_UNIX. Denials return an errno so that programs fail
// politely; a foreign syscall ABI (x32, i386) kills the process.
#include "moxi/sandbox/seccomp-policy.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "moxi/base/error.h"

namespace moxi::sandbox {
namespace {

// Syscalls refused with EPERM. Names unknown to this libseccomp/arch are skipped (resolved at run time).
constexpr const char* kDenied[] = {
    // other processes' memory and execution
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    // the filesystem layout (bwrap has already built it)
    "mount", "umount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "open_by_handle_at", "name_to_handle_at",
    // new namespaces: a fresh user namespace would hand back capabilities inside the sandbox
    "unshare", "setns",
    // the kernel itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf", "perf_event_open",
    "iopl", "ioperm", "swapon", "swapoff", "reboot", "acct", "syslog", "quotactl", "lookup_dcookie", "uselib",
    "vhangup", "fanotify_init", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    // keyrings are shared with the host user
    "keyctl", "add_key", "request_key",
    // classic race amplifiers for kernel exploits; io_uring bypasses the per-syscall filter entirely
    "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register"};

void check(int rc, const char* what) {
  if (rc < 0) throw error(std::string("seccomp: ") + what + ": " + std::strerror(-rc));
}

void deny(scmp_filter_ctx ctx, int errno_value, int nr, unsigned n_args = 0,
          const scmp_arg_cmp* args = nullptr) {
  check(seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(errno_value), nr, n_args, args), "rule");
}

std::string build(bool allow_inet) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) throw error("seccomp: seccomp_init failed");
  struct releaser {
    scmp_filter_ctx c;
    ~releaser() { seccomp_release(c); }
  } release{ctx};
  // Foreign ABIs would sidestep every rule below.
  check(seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS), "badarch");

  for (const char* name : kDenied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;
    deny(ctx, EPERM, nr);
  }

  // clone3 passes its flags in memory the filter cannot read; ENOSYS makes glibc fall back to clone.
  deny(ctx, ENOSYS, SCMP_SYS(clone3));
  // clone with any namespace flag.
  for (unsigned long flag : {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWIPC,
                             CLONE_NEWUTS, CLONE_NEWCGROUP}) {
    scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, flag, flag);
    deny(ctx, EPERM, SCMP_SYS(clone), 1, &a);
  }

  // Socket families: the kernel reads `domain` as an int, so compare the low 32 bits only (a value with
  // garbage in the upper half must not slip past). Families >= AF_MAX are rejected by the kernel itself.
  for (int family = 0; family < AF_MAX; ++family) {
    if (family == AF_UNIX) continue;
    if (allow_inet && (family == AF_INET || family == AF_INET6)) continue;
    scmp_arg_cmp a = SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, static_cast<scmp_datum_t>(family));
    deny(ctx, EAFNOSUPPORT, SCMP_SYS(socket), 1, &a);
    deny(ctx, EAFNOSUPPORT, SCMP_SYS(socketpair), 1, &a);
  }

  // Terminal injection (TIOCSTI) and the Linux console ioctl; ioctl's request is an unsigned int.
  for (unsigned long request : {static_cast<unsigned long>(TIOCSTI), static_cast<unsigned long>(TIOCLINUX)}) {
    scmp_arg_cmp a = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, request);
    deny(ctx, EPERM, SCMP_SYS(ioctl), 1, &a);
  }

  int fd = memfd_create("moxi-seccomp-build", MFD_CLOEXEC);
  if (fd < 0) throw io_error("memfd_create", "seccomp filter", errno);
  struct closer {
    int f;
    ~closer() { ::close(f); }
  } close_fd{fd};
  check(seccomp_export_bpf(ctx, fd), "export");
  off_t size = lseek(fd, 0, SEEK_END);
  std::string bpf(static_cast<size_t>(size), '\0');
  if (pread(fd, bpf.data(), bpf.size(), 0) != size) throw io_error("read", "seccomp filter", errno);
  MOXI_ASSERT(!bpf.empty() && bpf.size() % 8 == 0, "BPF must be whole sock_filter records");
  return bpf;
}

}  // namespace

const std::string& seccomp_bpf(bool allow_inet) {
  static std::once_flag once[2];
  static std::string bpf[2];
  std::call_once(once[allow_inet], [&] { bpf[allow_inet] = build(allow_inet); });
  return bpf[allow_inet];
}

int seccomp_bpf_memfd(bool allow_inet) {
  const std::string& bpf = seccomp_bpf(allow_inet);
  int fd = memfd_create("moxi-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw io_error("memfd_create", "seccomp filter", errno);
  if (pwrite(fd, bpf.data(), bpf.size(), 0) != static_cast<ssize_t>(bpf.size())) {
    int e = errno;
    ::close(fd);
    throw io_error("write", "seccomp filter", e);
  }
  // Sealed so nothing between here and bwrap's read can alter the program.
  fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
  return fd;
}

}  // namespace moxi::sandbox
