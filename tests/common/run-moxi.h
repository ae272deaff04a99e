// Running the built `moxi` binary from a test: its exit code, stdout and stderr apart.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace moxi::testing {

struct command_result {
  int code;  // exit status, or 128 + signal
  std::string out, err;
};

// Runs `env MOXI_BINARY_DIR/moxi args` through the shell with `input` on stdin; `dir` holds the stdin and
// stderr files.
inline command_result run_moxi(const std::string& args, const std::string& input, const std::string& dir,
                               const std::string& env = "") {
  const std::string in = dir + "/stdin.txt", err = dir + "/stderr.txt";
  std::ofstream(in, std::ios::binary) << input;
  const std::string cmd =
      env + " " + std::string(MOXI_BINARY_DIR) + "/moxi " + args + " <" + in + " 2>" + err;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, "", ""};
  command_result r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::stringstream ss;
  ss << std::ifstream(err, std::ios::binary).rdbuf();
  r.err = ss.str();
  return r;
}

// Runs a shell command line; its exit status (or 128 + signal) and its stdout (add 2>&1 for stderr too).
inline command_result run_shell(const std::string& cmd) {
  command_result r{-1, "", ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Starts args[0] (a path) with args, stdout and stderr to the file `log`; returns its pid.
inline pid_t spawn_logged(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits for pid: its exit status, or 128 + the signal that killed it.
inline int wait_exit(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace moxi::testing
