// Per-run cgroups for the sandbox. Each run gets its own group below the caller's own cgroup (so any
// limit placed on the caller still applies) and the group is removed when the run ends.
#include "moxi/sandbox/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "moxi/sandbox/sandbox.h"

namespace moxi::sandbox {
namespace {

constexpr const char* kRoot = "/sys/fs/cgroup";

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool write_file(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  ::close(fd);
  return ok;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The value of `key` in a "key value" per line file (memory.events, pids.events, oom_control, cpu.stat).
uint64_t keyed(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  uint64_t v;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

uint64_t number(const std::string& path) {
  std::string s = read_file(path);
  return s.empty() ? 0 : std::strtoull(s.c_str(), nullptr, 10);
}

// The caller's cgroup paths from /proc/self/cgroup: the v2 path ("0::") and v1 paths per controller.
struct self_cgroups {
  std::string unified;
  std::vector<std::pair<std::string, std::string>> v1;  // {controller list, path}
  std::string v1_path(const std::string& controller) const {
    for (const auto& [list, path] : v1) {
      std::istringstream in(list);
      std::string c;
      while (std::getline(in, c, ','))
        if (c == controller) return path;
    }
    return {};
  }
};

self_cgroups read_self() {
  self_cgroups s;
  std::istringstream in(read_file("/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string list = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (path == "/") path.clear();
    if (line.substr(0, a) == "0" && list.empty())
      s.unified = path;
    else
      s.v1.emplace_back(list, path);
  }
  return s;
}

// The start time of process `pid` (field 22 of /proc/PID/stat, clock ticks since boot), 0 when it does
// not exist. With the pid it names a process uniquely: a reused pid has a later start time.
uint64_t start_time(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto rp = stat.rfind(')');
  if (rp == std::string::npos) return 0;
  std::istringstream in(stat.substr(rp + 2));
  std::string field;
  for (int i = 3; i < 22 && in >> field; ++i) {
  }
  uint64_t t = 0;
  in >> t;
  return t;
}

std::string unique_name() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t self_start = start_time(::getpid());
  return "moxi-sb-" + std::to_string(::getpid()) + "-" + std::to_string(self_start) + "-" +
         std::to_string(counter++);
}

// The directories per-run groups are created in (see run_cgroup's constructor).
std::vector<std::string> parent_dirs() {
  self_cgroups self = read_self();
  if (exists(std::string(kRoot) + "/cgroup.controllers")) return {kRoot + self.unified};
  std::vector<std::string> out;
  for (const char* c : {"memory", "pids", "cpuacct"}) {
    std::string mount = std::string(kRoot) + "/" + c;
    if (exists(mount + "/cgroup.procs")) out.push_back(mount + self.v1_path(c));
  }
  return out;
}

// Whether the owner named in "moxi-sb-PID-START-N" (or the older "moxi-sb-PID-N") still runs.
bool owner_alive(const std::string& name) {
  std::vector<uint64_t> parts;
  std::istringstream in(name.substr(std::strlen("moxi-sb-")));
  std::string part;
  while (std::getline(in, part, '-')) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return true;  // not ours
    parts.push_back(std::strtoull(part.c_str(), nullptr, 10));
  }
  if (parts.size() != 2 && parts.size() != 3) return true;
  const auto pid = static_cast<pid_t>(parts[0]);
  if (pid <= 0 || static_cast<uint64_t>(pid) != parts[0]) return true;
  const uint64_t t = start_time(pid);
  if (t == 0) return false;  // no such process
  return parts.size() == 2 || t == parts[1];
}

}  // namespace

int sweep_stale_cgroups() {
  int removed = 0;
  for (const auto& parent : parent_dirs()) {
    DIR* d = ::opendir(parent.c_str());
    if (!d) continue;
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name.rfind("moxi-sb-", 0) == 0 && !owner_alive(name)) stale.push_back(name);
    }
    ::closedir(d);
    for (const auto& name : stale) {
      const std::string dir = parent + "/" + name;
      // Members are what is left of a dead owner's sandbox (normally none: bwrap dies with its parent).
      if (exists(dir + "/cgroup.kill")) write_file(dir + "/cgroup.kill", "1");
      for (int attempt = 0; attempt < 100; ++attempt) {
        std::istringstream procs(read_file(dir + "/cgroup.procs"));
        pid_t p;
        while (procs >> p) ::kill(p, SIGKILL);
        if (::rmdir(dir.c_str()) == 0) {
          ++removed;
          break;
        }
        if (errno != EBUSY) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
  }
  return removed;
}

run_cgroup::run_cgroup(uint64_t memory_bytes, uint32_t pids_max) {
  self_cgroups self = read_self();
  std::string name = unique_name();
  auto make = [&](const std::string& parent) -> std::string {
    std::string dir = parent + "/" + name;
    if (::mkdir(dir.c_str(), 0755) != 0) return {};
    dirs_.push_back(dir);
    procs_files_.push_back(dir + "/cgroup.procs");
    return dir;
  };

  if (exists(std::string(kRoot) + "/cgroup.controllers")) {
    // Unified hierarchy: the controllers must be enabled for our children. Writing subtree_control
    // fails when the caller's group has processes and is not the root; then we fall back to rlimits.
    v2_ = true;
    std::string parent = kRoot + self.unified;
    std::string available = read_file(parent + "/cgroup.controllers");
    for (const char* c : {"memory", "pids", "cpu"})
      if (available.find(c) != std::string::npos)
        write_file(parent + "/cgroup.subtree_control", std::string("+") + c);
    std::string dir = make(parent);
    if (dir.empty()) return;
    if (exists(dir + "/memory.max") &&
        (memory_bytes == 0 || write_file(dir + "/memory.max", std::to_string(memory_bytes)))) {
      write_file(dir + "/memory.swap.max", "0");
      memory_dir_ = dir;
    }
    if (exists(dir + "/pids.max") &&
        (pids_max == 0 || write_file(dir + "/pids.max", std::to_string(pids_max))))
      pids_dir_ = dir;
    if (exists(dir + "/cpu.stat")) cpu_dir_ = dir;
    return;
  }

  // v1: one hierarchy per controller.
  auto v1_parent = [&](const char* controller) -> std::string {
    std::string mount = std::string(kRoot) + "/" + controller;
    if (!exists(mount + "/cgroup.procs")) return {};
    return mount + self.v1_path(controller);
  };
  if (std::string p = v1_parent("memory"); !p.empty()) {
    std::string dir = make(p);
    if (!dir.empty()) {
      bool ok = memory_bytes == 0 || write_file(dir + "/memory.limit_in_bytes", std::to_string(memory_bytes));
      // memsw exists only with swap accounting; without it there is no swap escape to close.
      if (ok && memory_bytes && exists(dir + "/memory.memsw.limit_in_bytes"))
        write_file(dir + "/memory.memsw.limit_in_bytes", std::to_string(memory_bytes));
      if (ok) memory_dir_ = dir;
    }
  }
  if (std::string p = v1_parent("pids"); !p.empty()) {
    std::string dir = make(p);
    if (!dir.empty() && (pids_max == 0 || write_file(dir + "/pids.max", std::to_string(pids_max))))
      pids_dir_ = dir;
  }
  if (std::string p = v1_parent("cpuacct"); !p.empty()) {
    std::string dir = make(p);
    if (!dir.empty() && exists(dir + "/cpuacct.usage")) cpu_dir_ = dir;
  }
}

run_cgroup::~run_cgroup() {
  kill_all(2000);
  // Directories go children-first; there are none below ours.
  for (const auto& d : dirs_) ::rmdir(d.c_str());
}

std::string run_cgroup::path() const {
  return dirs_.empty() ? std::string() : dirs_.front();
}

std::vector<pid_t> run_cgroup::members() const {
  std::vector<pid_t> out;
  for (const auto& f : procs_files_) {
    std::istringstream in(read_file(f));
    pid_t p;
    while (in >> p) out.push_back(p);
  }
  return out;
}

bool run_cgroup::kill_all(int max_wait_ms) {
  if (dirs_.empty()) return true;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(max_wait_ms);
  if (v2_ && exists(dirs_.front() + "/cgroup.kill")) write_file(dirs_.front() + "/cgroup.kill", "1");
  for (;;) {
    auto pids = members();
    if (pids.empty()) return true;
    // Members are only ever our sandbox's processes: the group is private to this run.
    for (pid_t p : pids) ::kill(p, SIGKILL);
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

bool run_cgroup::wait_empty(int max_wait_ms) const {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(max_wait_ms);
  while (!members().empty()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

uint64_t run_cgroup::peak_memory_bytes() const {
  if (memory_dir_.empty()) return 0;
  return v2_ ? number(memory_dir_ + "/memory.peak") : number(memory_dir_ + "/memory.max_usage_in_bytes");
}

bool run_cgroup::memory_oom_killed() const {
  if (memory_dir_.empty()) return false;
  if (v2_) return keyed(read_file(memory_dir_ + "/memory.events"), "oom_kill") > 0;
  return keyed(read_file(memory_dir_ + "/memory.oom_control"), "oom_kill") > 0;
}

bool run_cgroup::memory_limit_reached() const {
  if (memory_dir_.empty()) return false;
  if (v2_) return keyed(read_file(memory_dir_ + "/memory.events"), "max") > 0;
  return number(memory_dir_ + "/memory.failcnt") > 0;
}

bool run_cgroup::pids_limit_reached() const {
  if (pids_dir_.empty()) return false;
  return keyed(read_file(pids_dir_ + "/pids.events"), "max") > 0;
}

double run_cgroup::cpu_seconds() const {
  if (cpu_dir_.empty()) return 0;
  if (v2_) return keyed(read_file(cpu_dir_ + "/cpu.stat"), "usage_usec") * 1e-6;
  return number(cpu_dir_ + "/cpuacct.usage") * 1e-9;
}

}  // namespace moxi::sandbox
