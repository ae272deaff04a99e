// Issue 14/B3: /dev was a writable tmpfs of host size (600 MB went into /dev/shm past every limit). Now
// /dev/shm is a tmpfs of limits.shm_bytes and /dev itself is read-only; and, so that the next such
// place is caught too, every writable tmpfs the command can see is one of /tmp, /dev/shm and the
// workspace, each with a size.
#include <gtest/gtest.h>

#include "sandbox-util.h"

namespace moxi::sandbox::sectest {
namespace {

using test::kv;

TEST(SandboxWritablePlaces, DevShmIsSizedAndDevIsReadOnly) {
  run_spec s;
  s.limits.shm_bytes = 4ull << 20;
  s.limits.memory_bytes = 256ull << 20;
  s.argv = {
      "sh", "-c",
      "head -c 16777216 /dev/zero > /dev/shm/fill; echo shm_rc=$?; echo shm_bytes=$(wc -c < /dev/shm/fill); "
      "echo x > /dev/planted 2>/dev/null; echo dev_file_rc=$?; mkdir /dev/d 2>/dev/null; echo dev_dir_rc=$?; "
      "echo y > /dev/null; echo devnull_rc=$?"};
  auto r = run(s);
  ASSERT_TRUE(r.ok()) << r.error << r.err.data;
  auto m = kv(r.out.data);
  EXPECT_NE(m["shm_rc"], "0");
  EXPECT_LE(std::stoull(m["shm_bytes"]), 4ull << 20);
  EXPECT_GT(std::stoull(m["shm_bytes"]), 0u);
  EXPECT_NE(m["dev_file_rc"], "0");
  EXPECT_NE(m["dev_dir_rc"], "0");
  EXPECT_EQ(m["devnull_rc"], "0");  // the device nodes still work
}

TEST(SandboxWritablePlaces, EveryWritableTmpfsIsBudgeted) {
  run_spec s;
  s.limits.tmp_bytes = 3ull << 20;
  s.limits.shm_bytes = 5ull << 20;
  s.limits.workspace_bytes = 7ull << 20;
  // Fields: 5 = mount point, 6 = per-mount options, then optional fields up to "-", then fstype,
  // source and super options.
  s.argv = {"awk", "{ i = 7; while ($i != \"-\") i++; print $5, $(i + 1), $6 \",\" $(i + 3) }",
            "/proc/self/mountinfo"};
  auto r = run(s);
  ASSERT_TRUE(r.ok()) << r.error << r.err.data;
  std::map<std::string, std::string> writable_tmpfs;  // mount point -> options
  std::istringstream in(r.out.data);
  std::string point, type, opts;
  while (in >> point >> type >> opts) {
    const bool ro = ("," + opts + ",").find(",ro,") != std::string::npos;
    if (type == "tmpfs" && !ro) writable_tmpfs[point] = opts;
  }
  std::map<std::string, uint64_t> expected = {{"/tmp", 3ull << 20}, {"/dev/shm", 5ull << 20}};
  if (::geteuid() == 0) expected["/workspace"] = 7ull << 20;  // the budget tmpfs needs CAP_SYS_ADMIN
  for (const auto& [p, o] : writable_tmpfs) {
    auto it = expected.find(p);
    EXPECT_NE(it, expected.end()) << "unbudgeted writable tmpfs at " << p << " (" << o << ")";
    if (it == expected.end()) continue;
    EXPECT_NE(o.find("size=" + std::to_string(it->second / 1024) + "k"), std::string::npos) << p << ": " << o;
  }
  for (const auto& [p, bytes] : expected)
    EXPECT_TRUE(writable_tmpfs.count(p)) << p << " missing:\n" << r.out.data;
}

}  // namespace
}  // namespace moxi::sandbox::sectest
