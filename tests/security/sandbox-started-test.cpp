// Issue 14/B5: a command that printed "bwrap: Creating new namespace failed" and exited 1 was recorded
// as started:false and its stdout was dropped, though it ran. Whether the command ran now comes from
// bubblewrap's --json-status-fd, which the command never holds; whatever it prints (on either stream)
// or does to its descriptors cannot change the record.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "moxi/sandbox/audit-log.h"
#include "sandbox-util.h"

namespace moxi::sandbox::sectest {
namespace {

const std::vector<std::string> kSpoofs = {
    "echo out; echo 'bwrap: Creating new namespace failed: Operation not permitted' >&2; exit 1",
    "echo 'bwrap: execvp x: No such file or directory' >&2; echo 'bwrap: x' ; exit 1",
    // The status descriptor's number and its neighbours: not open in the command.
    "echo '{ \"child-pid\": 1 }' >&4 2>/dev/null; echo '{ \"exit-code\": 1 }' >&5 2>/dev/null; "
    "echo bwrap: setting up uid map: Permission denied >&2; exit 1",
};

TEST(SandboxStarted, PrintedSetupErrorsDoNotMakeARunThatRanLookUnstarted) {
  scratch_dir s;
  const std::string log = s.path + "/audit.jsonl";
  for (const auto& script : kSpoofs) {
    SCOPED_TRACE(script);
    run_spec sp;
    sp.argv = {"sh", "-c", script};
    sp.audit_log = log;
    auto r = run(sp);
    EXPECT_TRUE(r.started) << r.error;
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(r.exit_code, 1);
  }
  auto r = run({.argv = {"sh", "-c", kSpoofs[0]}});
  EXPECT_EQ(r.out.data, "out\n");
  std::ifstream in(log);
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["started"], true) << line;
    EXPECT_FALSE(j.contains("error")) << line;
  }
  EXPECT_EQ(lines, int(kSpoofs.size()));
}

TEST(SandboxStarted, RealSetupFailuresAreStillReported) {
  run_spec missing;
  missing.argv = {"moxi-no-such-command-" + test::marker()};
  auto r = run(missing);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.error.find("moxi-no-such-command"), std::string::npos) << r.error;
  run_spec bad_bind;
  bad_bind.argv = {"true"};
  bad_bind.policy.ro_binds = {{"/moxi-no-such-dir-" + test::marker(), "/x"}};
  r = run(bad_bind);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.error.find("bwrap:"), std::string::npos) << r.error;
  EXPECT_EQ(test::live_children(), 0);
}

TEST(SandboxStarted, TheCliShowsTheOutputOfASpoofingCommandAndItsStatus) {
  auto c = run_moxi({"sandbox", "run", "-q", "--", "sh", "-c", kSpoofs[0]});
  EXPECT_EQ(c.status, 1) << c.err;
  EXPECT_EQ(c.out, "out\n");
  EXPECT_NE(c.err.find("bwrap: Creating new namespace failed"), std::string::npos) << c.err;
  // A real setup failure still fails the command with the reason.
  c = run_moxi({"sandbox", "run", "-q", "--", "moxi-no-such-command"});
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.err.find("moxi-no-such-command"), std::string::npos) << c.err;
}

}  // namespace
}  // namespace moxi::sandbox::sectest
