// Issue 14/B2: a workspace is resolved once without following links, must be owned by the caller, must
// not be a shared (world-writable or sticky) directory and must not be a system directory. Shared
// system directories (/tmp, /var/tmp, /dev/shm, /etc) are tried only inside a private mount namespace
// with a tmpfs over each, so that a regression could only ever touch that tmpfs.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "moxi/base/error.h"
#include "moxi/sandbox/workspace.h"
#include "sandbox-util.h"

namespace moxi::sandbox::sectest {
namespace {

// run() with `workspace` must throw moxi::error whose message contains `why`.
void expect_refused(const std::string& workspace, const std::string& why) {
  run_spec s;
  s.workspace = workspace;
  s.argv = {"true"};
  try {
    run(s);
    ADD_FAILURE() << "workspace '" << workspace << "' was accepted";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << workspace << ": " << e.what();
  }
}

uid_t owner(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 ? st.st_uid : uid_t(-1);
}

TEST(SandboxWorkspaceRules, DirectoriesOfOtherUsersAreRefusedAndLeftAlone) {
  if (::geteuid() != 0) GTEST_SKIP() << "making a directory of another uid needs root";
  scratch_dir s;
  const std::string other = s.dir("other", 0755);
  std::ofstream(other + "/file") << "theirs\n";
  ASSERT_EQ(::chown(other.c_str(), 12345, 12345), 0);
  ASSERT_EQ(::chown((other + "/file").c_str(), 12345, 12345), 0);
  expect_refused(other, "owned by uid 12345");
  EXPECT_EQ(owner(other), 12345u);
  EXPECT_EQ(owner(other + "/file"), 12345u);
  // Nor is a directory below it, existing or to be created: the walk stops at the other user's one.
  expect_refused(other + "/new", "owned by uid 12345");
  EXPECT_FALSE(test::path_exists(other + "/new"));
  const std::string mine_below = s.dir("other/mine", 0700);
  expect_refused(mine_below, "owned by uid 12345");
  // Nor below a directory that others may write and that is not sticky.
  s.dir("open", 0777);
  expect_refused(s.dir("open/mine", 0700), "writable by others");
}

TEST(SandboxWorkspaceRules, SharedDirectoriesAreRefused) {
  scratch_dir s;
  expect_refused(s.dir("sticky", 01777), "shared directory");
  expect_refused(s.dir("world", 0777), "shared directory");
  expect_refused(s.dir("sticky-only", 01755), "shared directory");
  // Owned by the caller and private: accepted.
  run_spec ok;
  ok.workspace = s.dir("mine", 0700);
  ok.argv = {"true"};
  EXPECT_TRUE(run(ok).ok());
}

TEST(SandboxWorkspaceRules, LinksAnywhereInThePathAreRefusedNotFollowed) {
  scratch_dir s;
  const std::string target = s.dir("target", 0755);
  std::ofstream(target + "/keep") << "keep\n";
  struct stat before;
  ASSERT_EQ(::stat(target.c_str(), &before), 0);
  // A link planted in a sticky directory (the /tmp case), as the last component and as an ancestor.
  const std::string sticky = s.dir("sticky", 01777);
  std::filesystem::create_symlink(target, sticky + "/ws");
  expect_refused(sticky + "/ws", "symbolic link");
  std::filesystem::create_symlink(target, s.path + "/via");
  expect_refused(s.path + "/via", "symbolic link");
  expect_refused(s.path + "/via/sub", "symbolic link");
  EXPECT_FALSE(test::path_exists(target + "/sub"));
  // A relative link to a parent, and ".." in the path.
  std::filesystem::create_symlink("..", s.dir("rel") + "/up");
  expect_refused(s.path + "/rel/up", "symbolic link");
  expect_refused(s.path + "/rel/../target", "'..'");
  struct stat after;
  ASSERT_EQ(::stat(target.c_str(), &after), 0);
  EXPECT_EQ(after.st_uid, before.st_uid);
  EXPECT_EQ(after.st_mode, before.st_mode);
  EXPECT_TRUE(test::path_exists(target + "/keep"));
}

TEST(SandboxWorkspaceRules, SystemDirectoriesAreRefusedLexically) {
  // The lexical rule, without touching anything (this includes "/" itself).
  for (const char* p :
       {"/", "/etc", "/etc/x", "/usr", "/usr/lib/x", "/tmp", "/var", "/var/tmp", "/home", "/root", "/dev",
        "/dev/shm", "/dev/shm/x", "/proc/self", "/sys/fs", "/run/user", "/boot"})
    EXPECT_TRUE(detail::is_system_path(p)) << p;
  for (const char* p : {"/tmp/x", "/var/tmp/x", "/home/u/w", "/root/w", "/srv/w"})
    EXPECT_FALSE(detail::is_system_path(p)) << p;
}

TEST(SandboxWorkspaceRules, SharedSystemDirectoriesAreRefusedInAPrivateMountNamespace) {
  if (::geteuid() != 0) GTEST_SKIP() << "a private mount namespace with tmpfs mounts needs root";
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Everything below happens in this child's own mount namespace over scratch tmpfs mounts.
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      _exit(90);
    int failures = 0;
    for (const char* p : {"/tmp", "/var/tmp", "/dev/shm", "/etc"}) {
      if (::mount("tmpfs", p, "tmpfs", 0, "mode=1777,size=1m") != 0) _exit(91);
      std::ofstream(std::string(p) + "/sentinel") << "x\n";
      for (const std::string& w : {std::string(p), std::string(p) + "/", std::string(p) + "/."}) {
        run_spec s;
        s.workspace = w;
        s.argv = {"true"};
        try {
          run(s);
          ++failures;  // accepted
        } catch (const moxi::error&) {
        }
      }
      struct stat st;
      if (::stat(p, &st) != 0 || st.st_uid != 0 || (st.st_mode & 07777) != 01777) ++failures;
      if (::stat((std::string(p) + "/sentinel").c_str(), &st) != 0 || st.st_uid != 0) ++failures;
    }
    _exit(failures);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "system directories accepted or changed (90/91: namespace setup failed)";
}

}  // namespace
}  // namespace moxi::sandbox::sectest
