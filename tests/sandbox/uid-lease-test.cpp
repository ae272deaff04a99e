// The uid pool: a uid is held by one run at a time, across threads and across processes, the lowest free
// one is taken, a full pool is a clear error, and the lock directory must be the caller's alone.
#include "moxi/sandbox/uid-lease.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/temp-dir.h"
#include "moxi/base/error.h"
#include "moxi/sandbox/sandbox.h"

namespace {
namespace fs = std::filesystem;
using moxi::sandbox::detail::uid_lease;

class UidLease : public moxi::testing::temp_dir_test {
 protected:
  std::string locks() { return path("locks"); }
};

TEST_F(UidLease, EachUidIsHeldOnceAndFreedOnRelease) {
  constexpr uid_t first = 0x70000000;
  auto a = uid_lease::take(first, 3, locks(), 0);
  auto b = uid_lease::take(first, 3, locks(), 0);
  auto c = uid_lease::take(first, 3, locks(), 0);
  EXPECT_EQ(a.uid(), first);
  EXPECT_EQ(b.uid(), first + 1);
  EXPECT_EQ(c.uid(), first + 2);
  try {
    uid_lease::take(first, 3, locks(), 20);
    ADD_FAILURE() << "a fourth lease from a pool of three";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("all 3 sandbox uids from 1879048192 are held"), std::string::npos)
        << e.what();
  }
  b = uid_lease();  // released
  auto d = uid_lease::take(first, 3, locks(), 0);
  EXPECT_EQ(d.uid(), first + 1);
  EXPECT_EQ(fs::status(locks()).permissions() & fs::perms::all, fs::perms::owner_all);
}

TEST_F(UidLease, AnotherProcessesLeaseIsRespected) {
  constexpr uid_t first = 0x70000100;
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c = 0;
    try {
      auto held = uid_lease::take(first, 1, locks(), 0);
      c = held.uid() == first ? 'y' : 'n';
      if (::write(to_parent[1], &c, 1) != 1) _exit(2);
      if (::read(to_child[0], &c, 1) != 1) _exit(3);
    } catch (...) {
      _exit(4);
    }
    _exit(0);  // the lease goes with the process
  }
  char c = 0;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  EXPECT_THROW(uid_lease::take(first, 1, locks(), 20), moxi::error);
  auto other = uid_lease::take(first, 2, locks(), 0);
  EXPECT_EQ(other.uid(), first + 1);
  ASSERT_EQ(::write(to_child[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(uid_lease::take(first, 1, locks(), 0).uid(), first) << "a dead holder's uid is free again";
}

TEST_F(UidLease, RefusesALockDirectoryOthersCouldWrite) {
  fs::create_directories(locks());
  fs::permissions(locks(), fs::perms(0777));
  EXPECT_THROW(uid_lease::take(0x70000000, 4, locks(), 0), moxi::error);
  fs::create_directories(path("real"));
  fs::permissions(path("real"), fs::perms(0700));
  fs::create_symlink(path("real"), path("link"));
  EXPECT_THROW(uid_lease::take(0x70000000, 4, path("link"), 0), moxi::error);
  EXPECT_THROW(uid_lease::take(0x70000000, 0, path("real"), 0), moxi::error);
  EXPECT_EQ(uid_lease::take(0x70000000, 4, path("real"), 0).uid(), 0x70000000u);
}

TEST_F(UidLease, NoPlaceForTheLockDirectoryGivesNoLease) {
  EXPECT_FALSE(uid_lease::take(0x70000000, 4, path("missing/locks"), 0).held());
  std::ofstream(path("file")) << "x";
  EXPECT_FALSE(uid_lease::take(0x70000000, 4, path("file/locks"), 0).held());
  EXPECT_TRUE(uid_lease::take(0x70000000, 4, locks(), 0).held());
}

}  // namespace

namespace {

TEST(UidMap, APoolIsUsableOnlyWhereTheNamespaceMapsAllOfIt) {
  using moxi::sandbox::detail::uids_mapped;
  const std::string host = "         0          0 4294967295\n";
  EXPECT_TRUE(uids_mapped(host, 0x70000000, 4096));
  EXPECT_TRUE(uids_mapped(host, 65534, 1));
  const std::string container = "0 100000 65536\n";  // a Kubernetes pod's or rootless podman's user namespace
  EXPECT_FALSE(uids_mapped(container, 0x70000000, 4096));
  EXPECT_TRUE(uids_mapped(container, 65534, 1));
  EXPECT_TRUE(uids_mapped(container, 60000, 5536));
  EXPECT_FALSE(uids_mapped(container, 60000, 5537));  // one past the map
  // Adjacent ranges in any order cover a pool across their seam; a hole does not.
  EXPECT_TRUE(uids_mapped("1000 5000 1000\n0 1 1000\n", 10, 1990));
  EXPECT_FALSE(uids_mapped("0 1 1000\n1001 5000 1000\n", 10, 1990));
  EXPECT_FALSE(uids_mapped("", 1, 1));
}

TEST(SandboxPolicy, IdentityRangesAreChecked) {
  using moxi::sandbox::check_policy;
  moxi::sandbox::policy p;
  EXPECT_NO_THROW(check_policy(p));
  auto bad = [](auto edit) {
    moxi::sandbox::policy q;
    edit(q);
    EXPECT_THROW(check_policy(q), moxi::error);
  };
  bad([](auto& q) { q.uid = 0; });
  bad([](auto& q) { q.gid = 0; });
  bad([](auto& q) { q.uid = static_cast<uid_t>(-1); });
  bad([](auto& q) { q.uid = q.uid_pool_first + q.uid_pool_size - 1; });  // inside the pool
  bad([](auto& q) { q.uid_pool_first = 0; });
  bad([](auto& q) { q.uid_pool_first = static_cast<uid_t>(-2); });  // reaches (uid_t)-1
  moxi::sandbox::policy none;
  none.uid_pool_size = 0;
  none.uid_pool_first = 0;  // unused without a pool
  EXPECT_NO_THROW(check_policy(none));
}

}  // namespace
