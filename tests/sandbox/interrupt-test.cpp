// Interrupting sandbox runs (docs/sandbox.md "Interrupts"): under an interrupt_guard, a SIGINT or SIGTERM
// that arrives while a run's command is alive makes run() kill and reap the tree and throw
// moxi::interrupted, with the run's temporary workspace and cgroup gone; a pool's queued runs never start.
// This binary is a child subreaper, so a process that outlived its parent would become our child and be
// counted; the commands carry a unique marker in their argv, so processes_with() sees only ours.
#include "moxi/base/interrupt.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "moxi/sandbox/pool.h"
#include "test-util.h"

namespace moxi::sandbox::test {
namespace {

namespace fs = std::filesystem;

// Reaps zombies re-parented to us and returns how many children still run.
int reap_and_count_live() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  return live_children();
}

class SandboxInterrupt : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0); }

  void SetUp() override {
    std::string tmpl = "/tmp/moxi-sbint-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    fs::permissions(tmpl, fs::perms(0755));
    dir_ = tmpl;
    // Temporary workspaces go to TMPDIR (docs/sandbox.md): ours, so that leftovers are counted exactly.
    const char* old = std::getenv("TMPDIR");
    old_tmpdir_ = old ? old : "";
    had_tmpdir_ = old != nullptr;
    ::setenv("TMPDIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (had_tmpdir_)
      ::setenv("TMPDIR", old_tmpdir_.c_str(), 1);
    else
      ::unsetenv("TMPDIR");
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // A command that runs until killed, recognisable by its argv.
  run_spec sleeper(const std::string& mark) const {
    run_spec s;
    s.argv = {"sh", "-c", "sleep 60; : " + mark};
    s.limits.timeout_s = 60;  // the interrupt, not a limit, must end it
    return s;
  }

  // Raises `sig` in this process once a command with `mark` in its argv runs (polled every ms), unless
  // `done` is set first (the run ended without it: the test fails on its own).
  static std::thread interrupt_when_running(const std::string& mark, int sig, const std::atomic<bool>& done) {
    return std::thread([mark, sig, &done] {
      while (!done && processes_with(mark) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!done) ::raise(sig);
    });
  }

  std::string dir_, old_tmpdir_;
  bool had_tmpdir_ = false;
};

TEST_F(SandboxInterrupt, RunningCommandIsKilledAndCleanedUp) {
  for (int sig : {SIGINT, SIGTERM}) {
    interrupt_guard guard;
    const std::string mark = marker();
    std::atomic<bool> done{false};
    std::thread t = interrupt_when_running(mark, sig, done);
    try {
      run(sleeper(mark));
      ADD_FAILURE() << "run() returned instead of throwing moxi::interrupted";
    } catch (const interrupted& e) {
      EXPECT_EQ(e.signal(), sig);
    }
    done = true;
    t.join();
    EXPECT_EQ(processes_with(mark), 0) << "the sandboxed command outlived the interrupted run";
    EXPECT_EQ(reap_and_count_live(), 0) << "a process of the run still runs";
    EXPECT_TRUE(fs::is_empty(dir_)) << "the temporary workspace was left behind";
    // Once interrupted, nothing new starts.
    EXPECT_THROW(run(sleeper(marker())), interrupted);
    EXPECT_TRUE(fs::is_empty(dir_));
  }
}

TEST_F(SandboxInterrupt, PoolRunsAllEndAndQueuedOnesNeverStart) {
  interrupt_guard guard;
  const std::string mark = marker();
  std::vector<std::future<run_result>> futures;
  {
    pool p(2, 16);
    for (int i = 0; i < 8; ++i) futures.push_back(p.submit(sleeper(mark)));
    std::atomic<bool> done{false};
    std::thread t = interrupt_when_running(mark, SIGINT, done);
    for (auto& f : futures) EXPECT_THROW(f.get(), interrupted);
    done = true;
    t.join();
  }
  EXPECT_EQ(processes_with(mark), 0);
  EXPECT_EQ(reap_and_count_live(), 0);
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(SandboxInterrupt, RunsWithoutAGuardAreUnaffected) {
  // No guard: the flag is never set, a run ends as its command does.
  run_spec s;
  s.argv = {"sh", "-c", "echo done"};
  const auto r = run(s);
  EXPECT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.out.data, "done\n");
  EXPECT_EQ(reap_and_count_live(), 0);
  EXPECT_TRUE(fs::is_empty(dir_));
}

}  // namespace
}  // namespace moxi::sandbox::test
