// Scaffolding of the tests that run moxi under mpirun (tests/cli/distributed*-test.cpp): the environment
// every rank runs with, and the processes of a job, found through /proc.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace moxi::testing {

// One thread per rank, and OpenMPI's shared-memory transport without cross-process memory access (which
// containers often forbid). For commands run through a shell:
inline const std::string kMpiEnv = "MOXI_THREADS=1 OMPI_MCA_btl_vader_single_copy_mechanism=none ";
// ... and for processes spawned directly, which inherit the test's environment.
inline void set_mpi_env() {
  ::setenv("MOXI_THREADS", "1", 1);
  ::setenv("OMPI_MCA_btl_vader_single_copy_mechanism", "none", 1);
}

// Pids of the processes whose command line contains `marker` and whose environment says MPI rank `rank`.
inline std::vector<pid_t> rank_pids(const std::string& marker, int rank) {
  std::vector<pid_t> out;
  const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank);
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(e.path() / "cmdline"), env(e.path() / "environ");
    std::string c((std::istreambuf_iterator<char>(cmd)), {}), v((std::istreambuf_iterator<char>(env)), {});
    if (c.find(marker) == std::string::npos) continue;
    for (size_t at = 0; at < v.size();) {
      const size_t end = v.find('\0', at);
      if (v.compare(at, end - at, want) == 0) out.push_back(pid_t(std::stoi(name)));
      if (end == std::string::npos) break;
      at = end + 1;
    }
  }
  return out;
}

inline bool any_process_with(const std::string& marker) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream cmd(e.path() / "cmdline");
    std::string c((std::istreambuf_iterator<char>(cmd)), {});
    if (c.find(marker) != std::string::npos) return true;
  }
  return false;
}

// Waits up to `seconds` for pid; its exit status (128 + signal when killed), or -1 when it still runs.
inline int wait_for(pid_t pid, double seconds) {
  for (int i = 0; i < int(seconds * 10); ++i) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

}  // namespace moxi::testing
