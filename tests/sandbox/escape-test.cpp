// Escape suite: each test makes one attempt to get out of the sandbox (files, network, processes,
// terminal, kernel interfaces) and asserts both the specific way it was stopped and that the host shows
// no trace of it afterwards.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>

#include <fstream>
#include <set>

#include "test-util.h"

namespace moxi::sandbox::test {
namespace {

run_result run_probe(const workspace_dir& ws, std::vector<std::string> args, bool allow_inet = false) {
  run_spec s = probe_spec(ws, std::move(args));
  s.policy.allow_inet = allow_inet;
  run_result r = run(s);
  EXPECT_TRUE(r.started) << r.error;
  EXPECT_EQ(live_children(), 0);
  if (!r.cgroup.empty()) {
    EXPECT_FALSE(path_exists(r.cgroup)) << "per-run cgroup not removed";
  }
  return r;
}

TEST(SandboxEscape, WritingOutsideTheWorkspaceIsDenied) {
  workspace_dir ws;
  std::string m = marker();
  for (std::string dir : {"/etc", "/usr", "/usr/bin"}) {
    std::string target = dir + "/" + m;
    auto r = run_probe(ws, {"write", target});
    EXPECT_EQ(kv(r.out.data)["write"], "EROFS") << target;
    EXPECT_FALSE(path_exists(target)) << target;
  }
  // The sandbox's own root and a path only the host has.
  EXPECT_EQ(kv(run_probe(ws, {"write", "/" + m}).out.data)["write"], "EROFS");
  EXPECT_EQ(kv(run_probe(ws, {"write", "/root/" + m}).out.data)["write"], "ENOENT");  // no /root inside
  EXPECT_FALSE(path_exists("/root/" + m));
  // /tmp is writable but private: nothing lands in the host's /tmp.
  auto r = run_probe(ws, {"write", "/tmp/" + m});
  EXPECT_EQ(kv(r.out.data)["write"], "OK");
  EXPECT_FALSE(path_exists("/tmp/" + m));
  // The workspace is the one shared place.
  r = run_probe(ws, {"write", "/workspace/" + m});
  EXPECT_EQ(kv(r.out.data)["write"], "OK");
  EXPECT_TRUE(path_exists(ws.path + "/" + m));
}

TEST(SandboxEscape, HostPathsThatAreNotExposedCannotBeRead) {
  workspace_dir ws;
  std::string secret = "/root/moxi-secret-" + marker();
  { std::ofstream(secret) << "top secret\n"; }
  ::chmod(secret.c_str(), 0600);
  auto r = run_probe(ws, {"read", secret});
  EXPECT_EQ(kv(r.out.data)["read"], "ENOENT");
  EXPECT_EQ(r.out.data.find("top secret"), std::string::npos);
  std::filesystem::remove(secret);
  // The source tree and the build tree are not mounted.
  EXPECT_EQ(kv(run_probe(ws, {"read", std::string(MOXI_SOURCE_DIR) + "/CMakeLists.txt"}).out.data)["read"],
            "ENOENT");
  EXPECT_EQ(kv(run_probe(ws, {"read", std::string(MOXI_BINARY_DIR) + "/CMakeCache.txt"}).out.data)["read"],
            "ENOENT");
  // /etc is visible, but root-only files in it stay closed: the sandbox runs as an unprivileged host uid.
  if (::geteuid() == 0 && path_exists("/etc/shadow")) {
    EXPECT_EQ(kv(run_probe(ws, {"read", "/etc/shadow"}).out.data)["read"], "EACCES");
  }
}

TEST(SandboxEscape, CallerEnvironmentIsNotVisible) {
  workspace_dir ws;
  ::setenv("MOXI_SANDBOX_TEST_SECRET", "hunter2", 1);
  run_spec s = probe_spec(ws, {"env"});
  s.env["EPISODE"] = "42";
  auto r = run(s);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.out.data.find("hunter2"), std::string::npos);
  std::set<std::string> keys;
  for (const auto& [k, v] : kv(r.out.data)) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"EPISODE", "HOME", "LANG", "PATH", "PWD", "TERM", "TMPDIR"}));
  EXPECT_EQ(kv(r.out.data)["EPISODE"], "42");
  EXPECT_EQ(kv(r.out.data)["HOME"], "/workspace");
}

// A TCP server on the host's loopback must be unreachable: by default the socket itself is refused by
// seccomp; with allow_inet the process has only its own network namespace, whose loopback has no server.
TEST(SandboxEscape, HostLoopbackTcpServerIsUnreachable) {
  int srv = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(srv, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(srv, 8), 0);
  socklen_t len = sizeof a;
  ::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len);
  std::string port = std::to_string(ntohs(a.sin_port));

  // Control: the server accepts a host connection, so a sandbox connection would be seen.
  int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  int accepted = ::accept(srv, nullptr, nullptr);
  EXPECT_GE(accepted, 0);
  ::close(accepted);
  ::close(c);

  workspace_dir ws;
  auto r = run_probe(ws, {"connect", "127.0.0.1", port});
  EXPECT_EQ(kv(r.out.data)["socket"], "EAFNOSUPPORT");
  r = run_probe(ws, {"connect", "127.0.0.1", port}, /*allow_inet=*/true);
  EXPECT_EQ(kv(r.out.data)["socket"], "OK");
  EXPECT_EQ(kv(r.out.data)["connect"], "ECONNREFUSED");
  EXPECT_LT(::accept(srv, nullptr, nullptr), 0) << "a sandboxed process reached the host's server";
  EXPECT_EQ(errno, EAGAIN);
  ::close(srv);
}

TEST(SandboxEscape, DnsFails) {
  workspace_dir ws;
  auto r = run_probe(ws, {"dns", "example.com"});
  EXPECT_EQ(kv(r.out.data)["dns"], "FAILED");
  EXPECT_EQ(kv(r.out.data)["udp_socket"], "EAFNOSUPPORT");
  r = run_probe(ws, {"dns", "example.com"}, /*allow_inet=*/true);
  EXPECT_EQ(kv(r.out.data)["dns"], "FAILED");
  EXPECT_EQ(kv(r.out.data)["udp_socket"], "OK");
  EXPECT_EQ(kv(r.out.data)["udp_send"], "ENETUNREACH");
}

TEST(SandboxEscape, OnlyUnixSocketsCanBeCreated) {
  workspace_dir ws;
  auto m = kv(run_probe(ws, {"sockets"}).out.data);
  EXPECT_EQ(m["unix"], "OK");
  for (const char* k : {"inet", "inet6", "netlink", "packet", "vsock", "inet_high_bits", "socketpair_inet"})
    EXPECT_EQ(m[k], "EAFNOSUPPORT") << k;
}

TEST(SandboxEscape, DangerousSyscallsAreDenied) {
  workspace_dir ws;
  auto m = kv(run_probe(ws, {"syscalls"}).out.data);
  for (const char* k : {"ptrace_traceme", "mount", "umount", "unshare_user", "unshare_ns", "clone_newuser",
                        "bpf", "perf_event_open", "keyctl", "add_key", "userfaultfd", "kexec_load",
                        "init_module", "io_uring_setup", "setns", "chroot"})
    EXPECT_EQ(m[k], "EPERM") << k;
  EXPECT_EQ(m["clone3"], "ENOSYS");  // so that libc falls back to the filtered clone
  EXPECT_EQ(m["fork"], "OK");
}

TEST(SandboxEscape, NoPrivilegesAndSetuidBinariesDoNotElevate) {
  workspace_dir ws;
  const auto id = run_probe(ws, {"id"});
  auto m = kv(id.out.data);
  EXPECT_EQ(m["CapEff"], "0000000000000000");
  EXPECT_EQ(m["CapPrm"], "0000000000000000");
  EXPECT_EQ(m["CapBnd"], "0000000000000000");
  EXPECT_EQ(m["NoNewPrivs"], "1");
  EXPECT_EQ(m["Seccomp"], "2");
  if (::geteuid() == 0) {
    // A uid of the pool, none of the host's accounts.
    const policy p;
    EXPECT_EQ(m["uid"], std::to_string(id.uid));
    EXPECT_GE(id.uid, p.uid_pool_first);
    EXPECT_LT(id.uid - p.uid_pool_first, p.uid_pool_size);
    EXPECT_EQ(m["gid"], std::to_string(p.gid));
    // A set-uid-root copy of the probe, planted in the workspace by the (root) host.
    std::string suid = ws.path + "/suid-probe";
    std::filesystem::copy_file(probe_binary(), suid);
    ASSERT_EQ(::chown(suid.c_str(), 0, 0), 0);
    ASSERT_EQ(::chmod(suid.c_str(), 04755), 0);
    run_spec s = probe_spec(ws, {"id"});
    s.argv[0] = "./suid-probe";
    auto r = run(s);
    ASSERT_TRUE(r.started) << r.error;
    auto sm = kv(r.out.data);
    EXPECT_EQ(sm["euid"], std::to_string(r.uid));
    EXPECT_NE(r.uid, 0u);
    EXPECT_EQ(sm["CapEff"], "0000000000000000");
  }
  // A real set-uid tool of the system fails to do its privileged work.
  if (path_exists("/usr/bin/mount")) {
    run_spec s = probe_spec(ws, {});
    s.argv = {"/usr/bin/mount", "-t", "tmpfs", "none", "/tmp"};
    auto r = run(s);
    ASSERT_TRUE(r.started) << r.error;
    EXPECT_NE(r.exit_code, 0);
  }
}

TEST(SandboxEscape, CallerCannotBeTracedOrSignalled) {
  workspace_dir ws;
  auto m = kv(run_probe(ws, {"ptrace", std::to_string(::getpid())}).out.data);
  EXPECT_EQ(m["ptrace_attach"], "EPERM");
  EXPECT_EQ(m["process_vm_readv"], "EPERM");
  EXPECT_EQ(m["kill0"], "ESRCH");  // not in the sandbox's PID namespace
  EXPECT_EQ(m["proc_entry"], "ENOENT");
  EXPECT_EQ(m["ptrace_pid1"], "EPERM");
}

// TIOCSTI: the caller owns a controlling terminal; the sandboxed command must neither reach it (new
// session, /dev/tty gives ENXIO) nor push input into any terminal (seccomp).
TEST(SandboxEscape, TiocstiCannotInjectIntoTheCallersTerminal) {
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  pid_t helper = ::fork();
  if (helper == 0) {
    ::close(report[0]);
    int master, slave;
    if (::openpty(&master, &slave, nullptr, nullptr, nullptr) != 0) _exit(10);
    ::setsid();
    if (::ioctl(slave, TIOCSCTTY, 0) != 0) _exit(11);
    // Raw mode: an injected byte is readable at once, without waiting for a newline.
    termios raw;
    ::tcgetattr(slave, &raw);
    ::cfmakeraw(&raw);
    ::tcsetattr(slave, TCSANOW, &raw);
    // Control: as root on a kernel with legacy TIOCSTI, injection into our own terminal works and is seen.
    char c = 'C';
    bool control = ::ioctl(slave, TIOCSTI, &c) == 0;
    ::fcntl(slave, F_SETFL, O_NONBLOCK);
    char buf[64];
    ssize_t control_read = control ? ::read(slave, buf, sizeof buf) : 0;
    run_result r;
    {
      workspace_dir ws;  // destroyed before _exit, which skips destructors
      r = run(probe_spec(ws, {"tiocsti"}));
    }
    ssize_t injected = ::read(slave, buf, sizeof buf);
    std::string out = r.out.data +
                      "control=" + (control ? (control_read == 1 ? "seen" : "lost") : "unsupported") +
                      "\ninjected=" + std::to_string(injected > 0 ? injected : 0) + "\n";
    ::write(report[1], out.data(), out.size());
    _exit(0);
  }
  ::close(report[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(report[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(report[0]);
  int status;
  ::waitpid(helper, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "helper failed: " << status;
  auto m = kv(out);
  EXPECT_NE(m["control"], "lost");
  EXPECT_EQ(m["injected"], "0");
  EXPECT_EQ(m["open_dev_tty"], "ENXIO");
  for (const char* k : {"tiocsti_fd0", "tiocsti_fd1", "tiocsti_fd2", "tiocsti_own_pty", "tiocsti_high_bits"})
    EXPECT_EQ(m[k], "EPERM") << k;
}

TEST(SandboxEscape, SymlinksDoNotLeadOutOfTheWorkspace) {
  std::string m = marker();
  std::string host_dir = "/tmp/moxi-symtarget-" + m;
  std::filesystem::create_directories(host_dir);
  { std::ofstream(host_dir + "/keep") << "keep\n"; }
  std::string secret = "/root/moxi-symsecret-" + m;
  { std::ofstream(secret) << "secret\n"; }
  struct stat before;
  ASSERT_EQ(::stat(host_dir.c_str(), &before), 0);
  {
    workspace_dir ws;
    std::filesystem::create_symlink(secret, ws.path + "/to_secret");
    std::filesystem::create_symlink("/etc/" + m, ws.path + "/to_etc");
    std::filesystem::create_symlink(host_dir, ws.path + "/to_host_dir");
    auto r = run_probe(ws, {"read", "to_secret"});
    EXPECT_EQ(kv(r.out.data)["read"], "ENOENT");  // resolved in the sandbox's view, where /root is absent
    EXPECT_EQ(kv(run_probe(ws, {"write", "to_etc"}).out.data)["write"], "EROFS");
    EXPECT_FALSE(path_exists("/etc/" + m));
    EXPECT_EQ(kv(run_probe(ws, {"write", "to_host_dir/planted"}).out.data)["write"], "ENOENT");
    // A link made inside to "/" resolves to the sandbox's root, whose /tmp is private.
    run_spec s = probe_spec(ws, {});
    s.argv = {"sh", "-c", "ln -s / rootlink && echo x > rootlink/tmp/" + m + " && echo wrote"};
    auto r2 = run(s);
    EXPECT_EQ(r2.out.data, "wrote\n");
    EXPECT_FALSE(path_exists("/tmp/" + m));
  }
  // Handing the workspace over (lchown) and removing it did not follow the links.
  struct stat after;
  ASSERT_EQ(::stat(host_dir.c_str(), &after), 0);
  EXPECT_EQ(after.st_uid, before.st_uid);
  EXPECT_TRUE(path_exists(host_dir + "/keep"));
  EXPECT_FALSE(path_exists(host_dir + "/planted"));
  struct stat secret_st;
  ASSERT_EQ(::stat(secret.c_str(), &secret_st), 0);
  EXPECT_EQ(secret_st.st_uid, ::geteuid());
  // A temporary workspace holding a link to a host directory is removed without touching the target.
  run_spec s;
  s.argv = {"ln", "-s", host_dir, "escape_link"};
  auto r = run(s);
  ASSERT_TRUE(r.ok()) << r.error << r.err.data;
  EXPECT_FALSE(path_exists(r.workspace));
  EXPECT_TRUE(path_exists(host_dir + "/keep"));
  std::filesystem::remove_all(host_dir);
  std::filesystem::remove(secret);
}

TEST(SandboxEscape, ProcAndSysShowNothingOfTheHost) {
  workspace_dir ws;
  auto m = kv(run_probe(ws, {"procs"}).out.data);
  EXPECT_LE(std::stoi(m["visible_pids"]), 3);  // bwrap's PID 1, the probe, at most a shell
  EXPECT_EQ(m["pid1_cmdline"].rfind("bwrap", 0), 0u) << m["pid1_cmdline"];
  EXPECT_EQ(m["sys_class_net"], "ENOENT");
  EXPECT_EQ(m["sys_fs_cgroup"], "ENOENT");
  EXPECT_NE(m["write_proc_sys"], "OK");
  EXPECT_NE(m["write_sysrq"], "OK");
  EXPECT_NE(m["proc_kcore"], "OK");
}

TEST(SandboxEscape, InheritedDescriptorsAreClosed) {
  // Deliberately inheritable descriptors in the caller: a file under /root and a socket.
  std::string path = "/root/moxi-fdleak-" + marker();
  int leaked = ::open(path.c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(leaked, 0);
  int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  workspace_dir ws;
  auto m = kv(run_probe(ws, {"fds"}).out.data);
  EXPECT_EQ(m["open_fds"], "3");  // stdin, stdout, stderr only
  ::close(leaked);
  ::close(sock);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moxi::sandbox::test
