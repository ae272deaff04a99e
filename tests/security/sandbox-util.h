// Helpers of the sandbox's hostile-input regressions (tests/security/sandbox-*-test.cpp, issue 14): a
// scratch directory the test owns (never a shared one), the moxi CLI run with captured streams, and the
// cgroup directories per-run groups live in, found independently of the library.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sandbox/test-util.h"

extern char** environ;

namespace moxi::sandbox::sectest {

// A directory of the test's own under /tmp (mode 0755 so that the sandbox uid can reach what lies
// below), removed with everything in it afterwards. Children the test makes are never shared.
struct scratch_dir {
  std::string path;
  scratch_dir() {
    std::string tmpl = "/tmp/moxi-sec-XXXXXX";
    if (!::mkdtemp(tmpl.data())) std::abort();
    path = tmpl;
    ::chmod(path.c_str(), 0755);
  }
  ~scratch_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  // A new subdirectory `name` with `mode`, owned by the caller.
  std::string dir(const std::string& name, mode_t mode = 0755) const {
    std::string p = path + "/" + name;
    std::filesystem::create_directories(p);
    ::chmod(p.c_str(), mode);
    return p;
  }
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

struct cli_result {
  int status = -1;  // exit status, -1 when killed by a signal
  std::string out, err;
};

// Runs build/moxi with `args` (no shell), stdout and stderr captured through files in a scratch dir.
inline cli_result run_moxi(const std::vector<std::string>& args) {
  scratch_dir d;
  const std::string out = d.path + "/out", err = d.path + "/err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string bin = std::string(MOXI_BINARY_DIR) + "/moxi";
  std::vector<std::string> all = {bin};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  cli_result r;
  if (::posix_spawn(&pid, bin.c_str(), &fa, nullptr, argv.data(), environ) == 0) {
    int st = 0;
    ::waitpid(pid, &st, 0);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  posix_spawn_file_actions_destroy(&fa);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// The directories below which run_cgroup creates per-run groups: the caller's own group in the v2
// hierarchy, or in each v1 hierarchy that has one of the controllers the sandbox uses. Read from
// /proc/self/cgroup, not from the library.
inline std::vector<std::string> cgroup_parents() {
  std::vector<std::string> out;
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  const bool v2 = test::path_exists("/sys/fs/cgroup/cgroup.controllers");
  while (std::getline(self, line)) {
    auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string list = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (path == "/") path.clear();
    if (v2) {
      if (line.rfind("0::", 0) == 0) out.push_back("/sys/fs/cgroup" + path);
      continue;
    }
    std::istringstream l(list);
    std::string c;
    while (std::getline(l, c, ','))
      if (c == "memory" || c == "pids" || c == "cpuacct") out.push_back("/sys/fs/cgroup/" + c + path);
  }
  return out;
}

// Entries named `prefix`* in the cgroup parents (full paths).
inline std::vector<std::string> cgroups_named(const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& parent : cgroup_parents()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(parent, ec))
      if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

}  // namespace moxi::sandbox::sectest
