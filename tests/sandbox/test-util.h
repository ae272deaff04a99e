// Shared helpers of the sandbox test suite: a workspace with the probe copied in, probe output parsing,
// and host-side leak checks (processes left behind, files created, cgroups not removed).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "moxi/sandbox/sandbox.h"

namespace moxi::sandbox::test {

inline std::string probe_binary() {
  return std::string(MOXI_BINARY_DIR) + "/moxi-sandbox-probe";
}

// A unique token for this test process, used in file names and argv so that leak checks never see
// another test's leftovers.
inline std::string marker() {
  static std::atomic<int> n{0};
  return "moxitest" + std::to_string(::getpid()) + "x" + std::to_string(n++);
}

// A fresh host directory with the probe at ./probe; removed afterwards.
struct workspace_dir {
  std::string path;
  workspace_dir() {
    std::string tmpl = "/tmp/moxi-sbtest-XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    path = tmpl;
    std::filesystem::copy_file(probe_binary(), path + "/probe");
    std::filesystem::permissions(path + "/probe", std::filesystem::perms(0755));
  }
  ~workspace_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// A spec with small limits that keep the suite fast.
inline run_spec probe_spec(const workspace_dir& ws, std::vector<std::string> args) {
  run_spec s;
  s.workspace = ws.path;
  s.argv = {"./probe"};
  s.argv.insert(s.argv.end(), args.begin(), args.end());
  s.limits.timeout_s = 10;
  s.limits.memory_bytes = 128ull << 20;
  s.limits.pids = 32;
  return s;
}

// `key=value` lines of probe output.
inline std::map<std::string, std::string> kv(const std::string& text) {
  std::map<std::string, std::string> m;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return m;
}

// Reads a /proc file of a process that may exit at any moment: reading a vanished process fails with
// ESRCH, which std::ifstream turns into an exception; here it just yields what was read so far.
inline std::string read_proc_file(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  ::close(fd);
  return out;
}

// Live processes whose command line contains `needle` (zombies have an empty one and are not counted).
inline int processes_with(const std::string& needle) {
  int n = 0;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    if (std::atoi(e->d_name) == ::getpid()) continue;
    const std::string cmd = read_proc_file(std::string("/proc/") + e->d_name + "/cmdline");
    if (cmd.find(needle) != std::string::npos) ++n;
  }
  ::closedir(d);
  return n;
}

// The children of this process (orphans of our sandboxes pass to us, their subreaper), zombies included:
// pid, state letter of /proc/PID/stat, owner uid.
struct child_proc {
  int pid;
  char state;
  uid_t uid;
};
inline std::vector<child_proc> our_children() {
  std::vector<child_proc> v;
  DIR* d = ::opendir("/proc");
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    const std::string text = read_proc_file(dir + "/stat");
    const auto rp = text.rfind(')');
    char state = 0;
    int ppid = -1;
    struct stat st;
    if (rp != std::string::npos && std::sscanf(text.c_str() + rp + 1, " %c %d", &state, &ppid) == 2 &&
        ppid == ::getpid() && ::stat(dir.c_str(), &st) == 0)
      v.push_back({std::atoi(e->d_name), state, st.st_uid});
  }
  ::closedir(d);
  return v;
}

// Our children that run as the host uid `uid`, zombies included: a zombie still counts against its uid's
// RLIMIT_NPROC.
inline int children_of_uid(uid_t uid) {
  int n = 0;
  for (const auto& c : our_children()) n += c.uid == uid;
  return n;
}

// Live descendants of this test process: after a run returns there must be none.
inline int live_children() {
  int n = 0;
  for (const auto& c : our_children()) n += c.state != 'Z';
  return n;
}

inline bool path_exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

// What the sandbox should report for memory/pids on this machine, found independently of the library:
// a v1 controller is usable when we can create a group below our own; v2 when the unified hierarchy has
// the controller enabled for our children; otherwise rlimits.
inline std::string expected_mechanism(const std::string& controller) {
  std::ifstream self("/proc/self/cgroup");
  std::string line, v1_path, v2_path;
  bool have_v2 = false;
  while (std::getline(self, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    std::string list = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.rfind("0::", 0) == 0) {
      v2_path = path;
      have_v2 = true;
    }
    std::istringstream l(list);
    std::string c;
    while (std::getline(l, c, ','))
      if (c == controller) v1_path = path;
  }
  auto can_mkdir = [](const std::string& parent) {
    std::string d = parent + "/moxi-sbtest-probe-" + std::to_string(::getpid());
    if (::mkdir(d.c_str(), 0755) != 0) return false;
    ::rmdir(d.c_str());
    return true;
  };
  if (path_exists("/sys/fs/cgroup/cgroup.controllers") && have_v2) {
    std::ifstream ctl("/sys/fs/cgroup" + v2_path + "/cgroup.subtree_control");
    std::string enabled((std::istreambuf_iterator<char>(ctl)), std::istreambuf_iterator<char>());
    return enabled.find(controller) != std::string::npos ? "cgroup-v2" : "rlimit";
  }
  std::string mount = "/sys/fs/cgroup/" + controller;
  if (path_exists(mount + "/cgroup.procs") && can_mkdir(mount + (v1_path == "/" ? "" : v1_path)))
    return "cgroup-v1";
  return "rlimit";
}

}  // namespace moxi::sandbox::test
