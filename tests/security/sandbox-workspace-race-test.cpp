// Issue 14/B1: a sandboxed run that swaps a workspace directory with a link to a host directory
// (renameat2 RENAME_EXCHANGE, in a loop) must not steer another run's host-side walk of the same
// workspace (hand-over to the sandbox uid, copy in and back, removal) into the linked directory. The
// victim tree is the test's own; the race runs real concurrent sandboxes, bounded in runs and seconds.
// Also: a workspace is not shared by two concurrent runs unless both say so.
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <future>
#include <thread>

#include "moxi/base/error.h"
#include "sandbox-util.h"

namespace moxi::sandbox::sectest {
namespace {

using test::kv;
using test::probe_binary;

struct victim_tree {
  std::string root;
  int files = 0;
  // Top-level files carry the names the swapping probe gives the files of its directory (f0..f255),
  // so that a path resolved through the swapped link lands on them; subdirectories catch a descent.
  victim_tree(const scratch_dir& s, int dirs, int per_dir) : root(s.dir("victim")) {
    for (int f = 0; f < 256; ++f) {
      std::ofstream(root + "/f" + std::to_string(f)) << "victim\n";
      ++files;
    }
    for (int d = 0; d < dirs; ++d) {
      std::string dir = root + "/d" + std::to_string(d);
      std::filesystem::create_directories(dir);
      for (int f = 0; f < per_dir; ++f) {
        std::ofstream(dir + "/f" + std::to_string(f)) << "victim\n";
        ++files;
      }
    }
  }
  // Entries that are no longer root:root with their original mode, or are gone.
  int changed() const {
    int bad = 0;
    int seen = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
      struct stat st;
      if (::lstat(e.path().c_str(), &st) != 0 || st.st_uid != 0 || st.st_gid != 0) ++bad;
      if (e.is_regular_file()) ++seen;
    }
    return bad + (files - seen);
  }
};

std::string make_workspace(const scratch_dir& s) {
  std::string w = s.dir("w");
  std::filesystem::copy_file(probe_binary(), w + "/probe");
  ::chmod((w + "/probe").c_str(), 0755);
  for (int i = 0; i < 32; ++i) std::ofstream(w + "/input" + std::to_string(i)) << i << "\n";
  return w;
}

// Run A swaps for `seconds` while runs B (at most `max_b`) go over the same workspace; returns the
// swaps A made.
long race(const std::string& w, const std::string& victim, uint64_t workspace_bytes, int max_b) {
  run_spec a;
  a.workspace = w;
  a.shared_workspace = true;
  a.argv = {"./probe", "swap", victim, "3"};
  a.limits.timeout_s = 30;
  a.limits.workspace_bytes = workspace_bytes;
  auto fa = std::async(std::launch::async, [&] { return run(a); });
  int b_runs = 0;
  while (fa.wait_for(std::chrono::seconds(0)) != std::future_status::ready && b_runs < max_b) {
    run_spec b;
    b.workspace = w;
    b.shared_workspace = true;
    b.argv = {"sh", "-c", "ls -R > /dev/null; true"};
    b.limits.workspace_bytes = workspace_bytes;
    auto rb = run(b);
    EXPECT_TRUE(rb.started) << rb.error;
    ++b_runs;
  }
  auto ra = fa.get();
  std::printf("race: %d runs B during run A (workspace_bytes=%llu)\n", b_runs,
              (unsigned long long)workspace_bytes);
  EXPECT_TRUE(ra.ok()) << "exit=" << ra.exit_code << " limit=" << to_string(ra.fired) << " error=" << ra.error
                       << " stdout=" << ra.out.data << " stderr=" << ra.err.data;
  EXPECT_GT(b_runs, 0);
  return std::atol(kv(ra.out.data)["swaps"].c_str());
}

TEST(SandboxWorkspaceRace, SwappedLinksNeverLeadHostWalksOutOfTheWorkspace) {
  if (::geteuid() != 0) GTEST_SKIP() << "the workspace is handed to the sandbox uid only by a root caller";
  scratch_dir s;
  victim_tree victim(s, 10, 100);
  const std::string w = make_workspace(s);
  // Without a budget the host directory is handed over in place while run A swaps (the path of the
  // original escape); with the budget each run copies in and back. Both walk descriptors.
  for (uint64_t budget : {uint64_t(0), uint64_t(64) << 20}) {
    SCOPED_TRACE("workspace_bytes=" + std::to_string(budget));
    long swaps = race(w, victim.root, budget, 40);
    EXPECT_GT(swaps, 0) << "the race did not happen";
    EXPECT_EQ(victim.changed(), 0) << "files outside the workspace were changed";
    // What A left behind is a link, never replaced by the victim's contents.
    struct stat st;
    if (::lstat((w + "/l").c_str(), &st) == 0) {
      EXPECT_TRUE(S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode));
    }
  }
  // Removing a temporary workspace that holds such a link leaves the target alone.
  run_spec t;
  t.argv = {"sh", "-c", "ln -s " + victim.root + " l && ln -s " + victim.root + "/d0 m"};
  auto r = run(t);
  ASSERT_TRUE(r.ok()) << r.error << r.err.data;
  EXPECT_FALSE(test::path_exists(r.workspace));
  EXPECT_EQ(victim.changed(), 0);
}

TEST(SandboxWorkspaceRace, AWorkspaceIsNotSharedUnlessBothRunsSaySo) {
  scratch_dir s;
  const std::string w = make_workspace(s);
  run_spec a;
  a.workspace = w;
  a.argv = {"sleep", "3"};  // long enough for the two attempts below, which take milliseconds
  a.limits.timeout_s = 60;
  auto fa = std::async(std::launch::async, [&] { return run(a); });
  // Wait until A holds its lock (a lock of ours would then fail).
  bool held = false;
  for (int i = 0; i < 2000 && !held; ++i) {
    int fd = ::open(w.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    held = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
    ::close(fd);
    if (!held) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(held) << "run A never locked its workspace";
  run_spec b;
  b.workspace = w;
  b.argv = {"true"};
  try {
    run(b);
    ADD_FAILURE() << "a second run got a workspace in use";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
  }
  b.shared_workspace = true;  // A did not say so: still refused
  EXPECT_THROW(run(b), moxi::error);
  auto ra = fa.get();
  EXPECT_TRUE(ra.ok()) << ra.error;
  b.shared_workspace = false;
  EXPECT_TRUE(run(b).ok());
}

}  // namespace
}  // namespace moxi::sandbox::sectest
