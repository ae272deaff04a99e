// Issue 14/B7: a moxi killed with SIGKILL cannot remove its per-run cgroups. A pool (and the first run
// of a process) sweeps moxi-sb-* groups whose owner is gone; groups of live owners stay, and a reused
// pid (same pid, other start time) does not protect a dead owner's group.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <future>
#include <thread>

#include "moxi/sandbox/pool.h"
#include "sandbox-util.h"

namespace moxi::sandbox::sectest {
namespace {

bool cgroups_usable() {
  return test::expected_mechanism("pids") != "rlimit" || test::expected_mechanism("memory") != "rlimit";
}

// Waits (bounded) until a group named prefix* exists; returns them.
std::vector<std::string> wait_for_groups(const std::string& prefix) {
  for (int i = 0; i < 2000; ++i) {
    auto g = cgroups_named(prefix);
    if (!g.empty()) return g;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return {};
}

TEST(SandboxStaleCgroups, AKilledMoxiLeavesGroupsThatTheNextPoolRemoves) {
  if (!cgroups_usable()) GTEST_SKIP() << "no usable cgroup controller here: runs use rlimits";
  std::string bin = std::string(MOXI_BINARY_DIR) + "/moxi";
  const std::string nap = "60." + std::to_string(::getpid());  // a sleep argument no one else uses
  std::vector<std::string> args = {bin, "sandbox", "run", "-q", "--timeout", "90", "--", "sleep", nap};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(::posix_spawn(&pid, bin.c_str(), nullptr, nullptr, argv.data(), environ), 0);
  const std::string prefix = "moxi-sb-" + std::to_string(pid) + "-";
  auto groups = wait_for_groups(prefix);
  ASSERT_FALSE(groups.empty()) << "moxi never created its cgroup";
  ::kill(pid, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  for (const auto& g : groups) EXPECT_TRUE(test::path_exists(g)) << g << " vanished by itself";
  {
    pool p(1);
    for (const auto& g : groups) EXPECT_FALSE(test::path_exists(g)) << g << " left after the sweep";
  }
  // The sleep of the killed run died with it (bwrap's parent-death signal, then the PID namespace).
  int left = test::processes_with(nap);
  for (int i = 0; i < 1000 && left > 0; ++i) {  // the kernel tears the namespace down asynchronously
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    left = test::processes_with(nap);
  }
  EXPECT_EQ(left, 0);
}

TEST(SandboxStaleCgroups, GroupsOfLiveOwnersStayAndReusedPidsDoNotProtect) {
  if (!cgroups_usable()) GTEST_SKIP() << "no usable cgroup controller here: runs use rlimits";
  auto parents = cgroup_parents();
  ASSERT_FALSE(parents.empty());
  const std::string me = std::to_string(::getpid());
  // A run of ours in flight: its group must survive a sweep.
  run_spec s;
  s.argv = {"sleep", "2"};
  auto f = std::async(std::launch::async, [&] { return run(s); });
  std::vector<std::string> live;
  for (int i = 0; i < 2000 && live.empty(); ++i) {
    live = cgroups_named("moxi-sb-" + me + "-");
    if (live.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(live.empty());
  // A group named for this very process but an impossible start time: its owner is gone (the pid was
  // reused by us), so it is swept. An old-style name (no start time) of a live pid is kept.
  const std::string forged = parents[0] + "/moxi-sb-" + me + "-1-0";
  const std::string legacy_live = parents[0] + "/moxi-sb-" + me + "-7";
  ASSERT_EQ(::mkdir(forged.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(legacy_live.c_str(), 0755), 0);
  EXPECT_GE(sweep_stale_cgroups(), 1);
  EXPECT_FALSE(test::path_exists(forged));
  EXPECT_TRUE(test::path_exists(legacy_live));
  for (const auto& g : live) EXPECT_TRUE(test::path_exists(g)) << g;
  EXPECT_TRUE(f.get().ok());
  ::rmdir(legacy_live.c_str());
}

}  // namespace
}  // namespace moxi::sandbox::sectest
