// Issue 14/B4: the workspace had no byte or inode budget (1.1 GB and 200k files in 7 s). Now the
// command writes a tmpfs of limits.workspace_bytes / workspace_inodes; filling it ends the run with
// limit=disk, and what comes back to the host directory stays within the budget, whatever the command
// made of it (hard links, set-id bits, links, FIFOs).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "moxi/base/error.h"
#include "sandbox-util.h"

namespace moxi::sandbox::sectest {
namespace {

uint64_t tree_bytes(const std::string& root, int* entries = nullptr) {
  uint64_t bytes = 0;
  int n = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    ++n;
    struct stat st;
    if (::lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) bytes += uint64_t(st.st_size);
  }
  if (entries) *entries = n;
  return bytes;
}

class SandboxDiskBudget : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "the budget tmpfs needs CAP_SYS_ADMIN; elsewhere mechanisms.disk=none";
    w = s.dir("w", 0700);
    std::ofstream(w + "/given.txt") << "from the host\n";
  }
  run_spec spec(const std::string& script) {
    run_spec r;
    r.workspace = w;
    r.argv = {"sh", "-c", script};
    r.limits.timeout_s = 60;
    r.limits.memory_bytes = 256ull << 20;
    r.limits.workspace_bytes = 4ull << 20;
    r.limits.workspace_inodes = 200;
    return r;
  }
  scratch_dir s;
  std::string w;
};

TEST_F(SandboxDiskBudget, FillingTheBytesEndsTheRunWithLimitDisk) {
  // The command keeps running after the write fails: the budget, not the timeout, must end it.
  auto r = run(spec("cat given.txt; head -c 33554432 /dev/zero > big; echo rc=$?; sleep 50"));
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.mechanisms.disk, "tmpfs");
  EXPECT_EQ(r.fired, limit_kind::disk) << r.out.data << r.err.data;
  EXPECT_TRUE(r.hit_limit(limit_kind::disk));
  EXPECT_NE(r.out.data.find("from the host"), std::string::npos);
  EXPECT_LE(tree_bytes(w), 4ull << 20);
  EXPECT_TRUE(test::path_exists(w + "/given.txt"));
}

TEST_F(SandboxDiskBudget, FillingTheInodesEndsTheRunWithLimitDisk) {
  auto r =
      run(spec("i=0; while [ $i -lt 5000 ]; do : > f$i || break; i=$((i+1)); done; echo made=$i; sleep 50"));
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.fired, limit_kind::disk) << r.out.data << r.err.data << r.error;
  int entries = 0;
  tree_bytes(w, &entries);
  EXPECT_LE(entries, 200);
  EXPECT_GT(entries, 100);
  // The next run on the same workspace starts from what came back (a full budget would end it at
  // once, so it gets a larger one).
  auto next_spec = spec("rm -f f*; echo left=$(ls | wc -l)");
  next_spec.limits.workspace_inodes = 1000;
  auto next = run(next_spec);
  EXPECT_TRUE(next.ok()) << next.error << next.err.data;
  EXPECT_NE(next.out.data.find("left=1"), std::string::npos) << next.out.data;
}

TEST_F(SandboxDiskBudget, HardLinksDoNotMultiplyOnTheWayBack) {
  auto r =
      run(spec("head -c 1048576 /dev/zero > one; i=0; while [ $i -lt 40 ]; do ln one h$i; i=$((i+1)); done; "
               "echo done"));
  ASSERT_TRUE(r.ok()) << r.error << r.err.data;
  EXPECT_EQ(r.out.data, "done\n");
  EXPECT_LE(tree_bytes(w), 4ull << 20) << "hard links multiplied on the host";
  EXPECT_NE(r.error.find("copy-back incomplete"), std::string::npos) << r.error;
}

TEST_F(SandboxDiskBudget, SetIdBitsLinksAndFifosComeBackHarmless) {
  auto r = run(spec("cp /bin/true suid && chmod 6755 suid && ln -s /etc/passwd pw && mkfifo q && echo done"));
  ASSERT_TRUE(r.ok()) << r.error << r.err.data;
  EXPECT_EQ(r.out.data, "done\n");
  EXPECT_TRUE(r.error.empty()) << r.error;
  struct stat st;
  ASSERT_EQ(::lstat((w + "/suid").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07000, 0u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  ASSERT_EQ(::lstat((w + "/pw").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(::lstat((w + "/q").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST_F(SandboxDiskBudget, AWorkspaceLargerThanItsBudgetIsRefusedBeforeTheRun) {
  std::ofstream(w + "/large", std::ios::binary) << std::string(5u << 20, 'x');
  EXPECT_THROW(run(spec("true")), moxi::error);
  EXPECT_TRUE(test::path_exists(w + "/large"));
}

TEST_F(SandboxDiskBudget, WithoutABudgetTheHostDirectoryIsWrittenDirectly) {
  auto sp = spec("echo direct > out.txt");
  sp.limits.workspace_bytes = 0;
  auto r = run(sp);
  ASSERT_TRUE(r.ok()) << r.error << r.err.data;
  EXPECT_EQ(r.mechanisms.disk, "none");
  EXPECT_EQ(slurp(w + "/out.txt"), "direct\n");
}

}  // namespace
}  // namespace moxi::sandbox::sectest
