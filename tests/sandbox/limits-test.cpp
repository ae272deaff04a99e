// Fault suite: runaway commands (fork bomb, memory bomb, infinite loop, SIGTERM-immune, huge output,
// huge files, leftover background processes) are stopped by the intended limit, the result names that
// limit and the mechanism that enforced it, and the host is left as it was.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <xxhash.h>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "test-util.h"

namespace moxi::sandbox::test {
namespace {

void expect_clean(const run_result& r, const std::string& needle) {
  EXPECT_EQ(live_children(), 0);
  if (!needle.empty()) {
    EXPECT_EQ(processes_with(needle), 0) << "processes survived the episode";
  }
  if (!r.cgroup.empty()) {
    EXPECT_FALSE(path_exists(r.cgroup)) << "per-run cgroup not removed";
  }
}

TEST(SandboxLimits, MechanismsMatchWhatThisMachineOffers) {
  workspace_dir ws;
  run_spec s = probe_spec(ws, {"id"});
  s.limits.cpu_s = 5;
  auto r = run(s);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.mechanisms.memory, expected_mechanism("memory"));
  EXPECT_EQ(r.mechanisms.pids, expected_mechanism("pids"));
  EXPECT_EQ(r.mechanisms.cpu,
            expected_mechanism(path_exists("/sys/fs/cgroup/cgroup.controllers") ? "cpu" : "cpuacct"));
  EXPECT_GT(r.peak_memory_bytes, 0u);
  EXPECT_GT(r.duration_s, 0);
}

TEST(SandboxLimits, WallClockTimeoutKillsASleeper) {
  workspace_dir ws;
  run_spec s = probe_spec(ws, {});
  std::string m = "13.5" + std::to_string(::getpid());  // unique sleep length as the marker
  s.argv = {"sleep", m};
  s.limits.timeout_s = 0.4;
  auto r = run(s);
  EXPECT_EQ(r.fired, limit_kind::timeout);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_LT(r.duration_s, 3.0);
  EXPECT_GE(r.duration_s, 0.4);
  expect_clean(r, "sleep " + m);
}

TEST(SandboxLimits, ProcessIgnoringSigtermIsStillKilled) {
  workspace_dir ws;
  std::string m = marker();
  run_spec s = probe_spec(ws, {"ignore-term", m});
  s.limits.timeout_s = 0.5;
  auto r = run(s);
  EXPECT_EQ(r.out.data, "ignoring\n");
  EXPECT_EQ(r.fired, limit_kind::timeout);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_LT(r.duration_s, 3.0);
  expect_clean(r, m);
}

TEST(SandboxLimits, InfiniteLoopHitsTheCpuLimit) {
  workspace_dir ws;
  std::string m = marker();
  run_spec s = probe_spec(ws, {"spin", m});
  s.limits.cpu_s = 0.5;
  s.limits.timeout_s = 10;
  auto r = run(s);
  EXPECT_EQ(r.fired, limit_kind::cpu) << to_string(r.fired);
  EXPECT_NE(r.signal, 0);
  EXPECT_GE(r.cpu_s, 0.45);
  EXPECT_LT(r.duration_s, 6.0);
  expect_clean(r, m);
}

TEST(SandboxLimits, ForkBombIsContained) {
  workspace_dir ws;
  std::string m = marker();
  run_spec s = probe_spec(ws, {"forkbomb", m});
  s.limits.pids = 16;
  s.limits.timeout_s = 1.5;
  auto r = run(s);
  EXPECT_EQ(r.fired, limit_kind::timeout)
      << to_string(r.fired) << " exit=" << r.exit_code << " " << r.err.data;
  if (r.mechanisms.pids != "rlimit") {
    EXPECT_TRUE(r.hit_limit(limit_kind::pids)) << "pids.max was never reached";
  }
  EXPECT_LT(r.duration_s, 6.0);
  expect_clean(r, m);
}

TEST(SandboxLimits, MemoryBombIsStopped) {
  workspace_dir ws;
  std::string m = marker();
  run_spec s = probe_spec(ws, {"membomb", "1024", m});
  s.limits.memory_bytes = 64ull << 20;
  auto r = run(s);
  ASSERT_TRUE(r.started) << r.error;
  if (r.mechanisms.memory == "rlimit") {
    // Address-space limit: allocation fails inside the program instead of an OOM kill.
    EXPECT_EQ(r.exit_code, 4);
    EXPECT_NE(r.out.data.find("malloc_failed_at_mb="), std::string::npos);
  } else {
    EXPECT_EQ(r.fired, limit_kind::memory) << to_string(r.fired);
    EXPECT_EQ(r.signal, SIGKILL);
    EXPECT_LE(r.peak_memory_bytes, (64ull << 20) + (1ull << 20));
    EXPECT_EQ(r.out.data.find("allocated_mb"), std::string::npos);
  }
  expect_clean(r, m);
}

TEST(SandboxLimits, FileSizeLimitStopsAHugeFile) {
  workspace_dir ws;
  run_spec s = probe_spec(ws, {"fsize", "big", "5000000"});
  s.limits.file_size_bytes = 1 << 20;
  auto r = run(s);
  EXPECT_EQ(r.fired, limit_kind::file_size);
  EXPECT_EQ(r.signal, SIGXFSZ);
  EXPECT_EQ(std::filesystem::file_size(ws.path + "/big"), 1u << 20);
  expect_clean(r, "");
}

TEST(SandboxLimits, HugeOutputIsTruncatedWithoutBlockingTheChild) {
  workspace_dir ws;
  const uint64_t total = 50'000'000;
  run_spec s = probe_spec(ws, {"output", std::to_string(total)});
  s.limits.output_bytes = 65536;
  auto r = run(s);
  EXPECT_EQ(r.exit_code, 0);  // the child wrote everything and exited by itself
  EXPECT_EQ(r.fired, limit_kind::none);
  EXPECT_TRUE(r.hit_limit(limit_kind::output));
  EXPECT_EQ(r.out.data.size(), 65536u);
  EXPECT_EQ(r.out.bytes, total);
  EXPECT_TRUE(r.out.truncated);
  // The hash covers the whole stream, not only the captured part.
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::string chunk(1 << 16, 'o');
  for (uint64_t left = total; left > 0;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(left, chunk.size()));
    XXH3_64bits_update(st, chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(r.out.xxh3, XXH3_64bits_digest(st));
  XXH3_freeState(st);
  expect_clean(r, "");
}

TEST(SandboxLimits, EndlessOutputEndsAtTheTimeout) {
  workspace_dir ws;
  run_spec s = probe_spec(ws, {});
  s.argv = {"yes", marker()};
  s.limits.timeout_s = 0.5;
  s.limits.output_bytes = 4096;
  auto r = run(s);
  EXPECT_EQ(r.fired, limit_kind::timeout);
  EXPECT_TRUE(r.out.truncated);
  EXPECT_EQ(r.out.data.size(), 4096u);
  EXPECT_GT(r.out.bytes, 4096u);
  expect_clean(r, s.argv[1]);
}

TEST(SandboxLimits, BackgroundProcessesDoNotSurviveTheEpisode) {
  workspace_dir ws;
  std::string seconds = "29.7" + std::to_string(::getpid());
  auto r = run(probe_spec(ws, {"daemon", seconds}));
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.data, "daemonized\n");
  EXPECT_LT(r.duration_s, 10.0);  // we did not wait for the 29 s daemon
  expect_clean(r, "sleep " + seconds);
  // Also with a shell job that keeps stdout open.
  run_spec s = probe_spec(ws, {});
  std::string seconds2 = "28.7" + std::to_string(::getpid());
  s.argv = {"sh", "-c", "sleep " + seconds2 + " & echo started"};
  r = run(s);
  EXPECT_EQ(r.out.data, "started\n");
  EXPECT_LT(r.duration_s, 10.0);
  expect_clean(r, "sleep " + seconds2);
}

// The rlimit fallback, forced here so that it is exercised even on machines where cgroups work.
TEST(SandboxLimitsFallback, MemoryBombFailsAgainstTheAddressSpaceLimit) {
  workspace_dir ws;
  run_spec s = probe_spec(ws, {"membomb", "1024"});
  s.limits.memory_bytes = 64ull << 20;
  s.limits.use_cgroup = false;
  auto r = run(s);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.mechanisms.memory, "rlimit");
  EXPECT_TRUE(r.cgroup.empty());
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_NE(r.out.data.find("malloc_failed_at_mb="), std::string::npos) << r.out.data;
  expect_clean(r, "");
}

TEST(SandboxLimitsFallback, ForkBombIsContainedWithoutACgroup) {
  workspace_dir ws;
  std::string m = marker();
  run_spec s = probe_spec(ws, {"forkbomb", m});
  s.limits.pids = 16;
  s.limits.timeout_s = 1.0;
  s.limits.use_cgroup = false;
  auto r = run(s);
  EXPECT_EQ(r.mechanisms.pids, ::geteuid() == 0 ? "rlimit" : "none");
  EXPECT_EQ(r.fired, limit_kind::timeout);
  EXPECT_LT(r.duration_s, 6.0);
  // Without a cgroup the tree dies with the PID namespace when bwrap is killed.
  expect_clean(r, m);
}

// RLIMIT_NPROC counts every process of a uid: runs that overlap must each count only their own, which
// holds because each runs as a uid of its own. Six runs of nine processes each (bwrap's two, the probe,
// six children) under a limit of ten (pids 8 + bwrap's two): with one shared uid they would refuse each
// other's forks.
TEST(SandboxLimitsFallback, OverlappingRunsEachGetTheirOwnProcessLimit) {
  if (::geteuid() != 0) GTEST_SKIP() << "the process-limit fallback applies to a root caller only";
  constexpr int kRuns = 6;
  std::vector<workspace_dir> wss(kRuns);
  std::vector<run_result> rs(kRuns);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRuns; ++i) {
    threads.emplace_back([&, i] {
      run_spec s = probe_spec(wss[static_cast<size_t>(i)], {"children", "6", "1.5"});
      s.limits.pids = 8;
      s.limits.use_cgroup = false;
      rs[static_cast<size_t>(i)] = run(s);
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> uids;
  for (const auto& r : rs) {
    ASSERT_TRUE(r.ok()) << r.error << r.err.data;
    EXPECT_EQ(r.mechanisms.pids, "rlimit");
    auto m = kv(r.out.data);
    EXPECT_EQ(m["forked"], "6") << "uid " << m["uid"];
    EXPECT_EQ(m["uid"], std::to_string(r.uid)) << "the result names the uid the command ran as";
    uids.insert(m["uid"]);
  }
  EXPECT_EQ(uids.size(), static_cast<size_t>(kRuns)) << "overlapping runs shared a uid";
  // Alone, a run still meets its limit: of nine children, at most seven fit (bwrap's two + the probe + 7
  // = 10); the kernel's count across the user namespace bwrap makes admits six on Linux 6.18.
  workspace_dir ws;
  run_spec s = probe_spec(ws, {"children", "9", "0.2"});
  s.limits.pids = 8;
  s.limits.use_cgroup = false;
  auto r = run(s);
  ASSERT_TRUE(r.ok()) << r.error;
  const int forked = std::atoi(kv(r.out.data)["forked"].c_str());
  EXPECT_GE(forked, 6) << r.out.data;
  EXPECT_LE(forked, 7) << r.out.data;
}

// bwrap's outer process exits without reaping the sandbox's PID 1; moxi, its subreaper, reaps it before
// run() returns, so not even a zombie of the run's uid is left to count against the next run of that uid.
// (The uid may meanwhile serve another process's run: only our own children count.)
TEST(SandboxLimitsFallback, NoProcessOfTheRunsUidOutlivesIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "runs drop to a uid of their own for a root caller only";
  for (bool cgroup : {false, true}) {
    for (int i = 0; i < 3; ++i) {
      workspace_dir ws;
      run_spec s = probe_spec(ws, {"children", "3", "0.1"});
      s.limits.use_cgroup = cgroup;
      auto r = run(s);
      ASSERT_TRUE(r.ok()) << r.error;
      EXPECT_EQ(children_of_uid(r.uid), 0) << "uid " << r.uid << (cgroup ? " (cgroup)" : " (rlimit)");
    }
  }
  // A command so short that bwrap is gone before run() first reads its status: PID 1 is reaped too.
  for (int i = 0; i < 20; ++i) {
    workspace_dir ws;
    run_spec s = probe_spec(ws, {});
    s.argv = {"/bin/true"};
    s.limits.use_cgroup = i % 2 == 0;
    auto r = run(s);
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_EQ(children_of_uid(r.uid), 0) << "run " << i << ", uid " << r.uid;
  }
  // The same from four threads at once (the RL loop's and the eval's checkers run in a pool).
  std::vector<std::thread> threads;
  std::vector<uid_t> uids(40);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int i = k; i < 40; i += 4) {
        workspace_dir ws;
        run_spec s = probe_spec(ws, {});
        s.argv = {"/bin/true"};
        s.limits.use_cgroup = i % 2 == 0;
        uids[size_t(i)] = run(s).uid;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const uid_t u : std::set<uid_t>(uids.begin(), uids.end()))
    EXPECT_EQ(children_of_uid(u), 0) << "uid " << u;
}

// Runs the probe's `id` in the sandbox from a forked child that first calls `enter` (a namespace of its
// own; false: exit 10) and then waits while the parent calls `setup(child pid)`. Returns the child's
// key=value report: the probe's output, or error=...; result_uid= the uid run() reports.
std::map<std::string, std::string> id_in_child(const workspace_dir& ws, const std::function<bool()>& enter,
                                               const std::function<void(pid_t)>& setup) {
  int go[2], done[2];
  if (::pipe(go) != 0 || ::pipe(done) != 0) return {{"error", "pipe"}};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(go[1]);
    ::close(done[0]);
    char c;
    if (!enter()) _exit(10);
    if (::write(done[1], "u", 1) != 1 || ::read(go[0], &c, 1) != 1) _exit(11);
    std::string out;
    try {
      run_spec s = probe_spec(ws, {"id"});
      s.limits.use_cgroup = false;
      const auto r = run(s);
      out = (r.ok() ? r.out.data : "error=" + r.error + "\n") + "result_uid=" + std::to_string(r.uid) + "\n";
    } catch (const std::exception& e) {
      out = std::string("error=") + e.what() + "\n";
    }
    _exit(::write(done[1], out.data(), out.size()) < 0 ? 13 : 0);
  }
  ::close(go[0]);
  ::close(done[1]);
  char c = 0;
  const bool entered = pid > 0 && ::read(done[0], &c, 1) == 1;
  if (entered) setup(pid);
  std::string text;
  if (entered && ::write(go[1], "g", 1) == 1) {
    char buf[4096];
    for (ssize_t n; (n = ::read(done[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  }
  ::close(go[1]);
  ::close(done[0]);
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  if (!entered || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return {{"error", "child status " + std::to_string(status)}};
  return kv(text);
}

// A container's user namespace maps only 0-65535 (Kubernetes pods with hostUsers: false, rootless podman):
// setresuid to a pool uid above that fails, so there every run drops to policy.uid instead. The child
// process enters such a namespace (its parent, root outside, writes the maps) and runs the sandbox there.
TEST(SandboxLimitsFallback, AUserNamespaceWithoutThePoolRunsAsPolicyUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to write a child's uid map";
  workspace_dir ws;
  ::chmod(ws.path.c_str(), 0755);
  auto m = id_in_child(
      ws, [] { return ::unshare(CLONE_NEWUSER) == 0; },
      [](pid_t pid) {
        for (const char* f : {"uid_map", "gid_map"})
          std::ofstream("/proc/" + std::to_string(pid) + "/" + f) << "0 0 65536\n";
      });
  EXPECT_EQ(m["error"], "");
  EXPECT_EQ(m["uid"], "65534");
  EXPECT_EQ(m["result_uid"], "65534");
}

// A hardened container's read-only root leaves no place for the uid locks (/run/moxi-sandbox): runs
// drop to policy.uid there rather than fail. The child makes /run an empty read-only tmpfs in a mount
// namespace of its own.
TEST(SandboxLimitsFallback, AReadOnlyRunDirectoryRunsAsPolicyUid) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root for a mount namespace";
  workspace_dir ws;
  ::chmod(ws.path.c_str(), 0755);
  auto m = id_in_child(
      ws,
      [] {
        return ::unshare(CLONE_NEWNS) == 0 &&
               ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
               ::mount("tmpfs", "/run", "tmpfs", MS_RDONLY, "size=64k") == 0;
      },
      [](pid_t) {});
  EXPECT_EQ(m["error"], "");
  EXPECT_EQ(m["uid"], "65534");
  EXPECT_EQ(m["result_uid"], "65534");
}

TEST(SandboxLimitsFallback, InfiniteLoopGetsSigxcpu) {
  workspace_dir ws;
  run_spec s = probe_spec(ws, {"spin"});
  s.limits.cpu_s = 0.5;  // rounded up to whole seconds by RLIMIT_CPU
  s.limits.use_cgroup = false;
  auto r = run(s);
  EXPECT_EQ(r.mechanisms.cpu, "rlimit");
  EXPECT_EQ(r.fired, limit_kind::cpu);
  EXPECT_EQ(r.signal, SIGXCPU);
  EXPECT_GE(r.duration_s,
            0.9);  // the loop ran until the rounded-up limit (cpu_s is not known without a cgroup)
  expect_clean(r, "");
}

}  // namespace
}  // namespace moxi::sandbox::test
