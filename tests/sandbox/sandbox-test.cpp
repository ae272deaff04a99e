// Basic behaviour of the sandbox API and CLI: exit status, streams, stdin, workspaces, errors for bad
// specs, the audit log record, and `moxi sandbox run` / `moxi bench sandbox` end to end.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <xxhash.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "moxi/base/error.h"
#include "moxi/sandbox/audit-log.h"
#include "test-util.h"

namespace moxi::sandbox::test {
namespace {

TEST(Sandbox, RunsACommandAndReportsItsStatusAndStreams) {
  run_spec s;
  s.argv = {"sh", "-c", "echo out; echo err >&2; pwd; exit 7"};
  auto r = run(s);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.exit_code, 7);
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.out.data, "out\n/workspace\n");
  EXPECT_EQ(r.err.data, "err\n");
  EXPECT_EQ(r.out.bytes, r.out.data.size());
  EXPECT_EQ(r.out.xxh3, XXH3_64bits(r.out.data.data(), r.out.data.size()));
  EXPECT_EQ(r.fired, limit_kind::none);
  EXPECT_TRUE(r.hit.empty());
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(path_exists(r.workspace)) << "temporary workspace left behind";
}

TEST(Sandbox, FeedsStdin) {
  run_spec s;
  s.argv = {"cat"};
  s.stdin_data = "hello sandbox\n";
  auto r = run(s);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_EQ(r.out.data, "hello sandbox\n");
}

TEST(Sandbox, WorkspaceIsSharedWithTheHostAndKeptWhenGiven) {
  workspace_dir ws;
  { std::ofstream(ws.path + "/input.txt") << "41\n"; }
  run_spec s = probe_spec(ws, {});
  s.argv = {"sh", "-c", "echo $(( $(cat input.txt) + 1 )) > output.txt && echo $HOME"};
  auto r = run(s);
  ASSERT_TRUE(r.ok()) << r.error << r.err.data;
  EXPECT_EQ(r.workspace, ws.path);
  std::ifstream out(ws.path + "/output.txt");
  std::string v;
  out >> v;
  EXPECT_EQ(v, "42");
}

TEST(Sandbox, KeptTemporaryWorkspaceSurvives) {
  run_spec s;
  s.argv = {"touch", "made-here"};
  s.keep_workspace = true;
  auto r = run(s);
  ASSERT_TRUE(r.ok()) << r.error;
  EXPECT_TRUE(path_exists(r.workspace + "/made-here"));
  std::filesystem::remove_all(r.workspace);
}

TEST(Sandbox, BadSpecsAreUserErrors) {
  run_spec s;
  EXPECT_THROW(run(s), moxi::error);  // empty command
  s.argv = {"true"};
  s.workspace = "/etc";
  EXPECT_THROW(run(s), moxi::error);  // a system directory would be handed to the sandbox uid
  s.workspace = "/";
  EXPECT_THROW(run(s), moxi::error);
  s.workspace = "/usr/lib/moxi-should-not-exist";
  EXPECT_THROW(run(s), moxi::error);
  EXPECT_FALSE(path_exists("/usr/lib/moxi-should-not-exist"));
  if (::geteuid() == 0) {
    // /root is not searchable by the sandbox uid, so bwrap could not bind a workspace below it.
    s.workspace = "/root/moxi-sbtest-unreachable-" + marker();
    EXPECT_THROW(run(s), moxi::error);
    std::filesystem::remove_all(s.workspace);
  }
  s.workspace.clear();
  s.limits.timeout_s = 0;
  EXPECT_THROW(run(s), moxi::error);
}

TEST(Sandbox, MissingCommandIsASetupFailureNotACrash) {
  run_spec s;
  s.argv = {"moxi-no-such-command"};
  auto r = run(s);
  EXPECT_FALSE(r.started);
  EXPECT_NE(r.error.find("moxi-no-such-command"), std::string::npos) << r.error;
  EXPECT_EQ(live_children(), 0);
}

TEST(Sandbox, AuditLogRecordsEachExecutionAsOneJsonLine) {
  workspace_dir ws;
  std::string log = ws.path + "/../moxi-audit-" + marker() + ".jsonl";
  run_spec s = probe_spec(ws, {"output", "100"});
  s.audit_log = log;
  s.id = "episode-1";
  auto r1 = run(s);
  ASSERT_TRUE(r1.ok()) << r1.error;
  run_spec t = probe_spec(ws, {"spin"});
  t.audit_log = log;
  t.id = "episode-2";
  t.limits.timeout_s = 0.3;
  run(t);
  std::ifstream in(log);
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  std::filesystem::remove(log);
  ASSERT_EQ(lines.size(), 2u);
  const auto& a = lines[0];
  EXPECT_EQ(a["id"], "episode-1");
  EXPECT_EQ(a["command"], (nlohmann::json{"./probe", "output", "100"}));
  EXPECT_EQ(a["workspace"], ws.path);
  EXPECT_EQ(a["exit_code"], 0);
  EXPECT_EQ(a["signal"], 0);
  EXPECT_EQ(a["limit_fired"], "none");
  EXPECT_EQ(a["limits"]["memory_bytes"], 128ull << 20);
  EXPECT_EQ(a["limits"]["pids"], 32);
  EXPECT_EQ(a["stdout"]["bytes"], 100);
  EXPECT_EQ(a["stdout"]["head"], std::string(100, 'o'));
  EXPECT_EQ(a["stdout"]["xxh3"].get<std::string>().size(), 16u);
  EXPECT_EQ(a["stderr"]["bytes"], 0);
  EXPECT_GT(a["duration_s"].get<double>(), 0);
  EXPECT_GT(a["peak_memory_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(a["mechanisms"]["memory"], r1.mechanisms.memory);
  const auto& b = lines[1];
  EXPECT_EQ(b["id"], "episode-2");
  EXPECT_EQ(b["limit_fired"], "timeout");
  EXPECT_EQ(b["signal"], 9);
  EXPECT_EQ(b["limits_hit"], (nlohmann::json{"timeout"}));
}

// Runs the moxi binary with `args`, capturing stdout and stderr separately.
struct cli_result {
  int status = -1;
  std::string out, err;
};

cli_result run_cli(const std::vector<std::string>& args) {
  std::string dir = "/tmp/moxi-sbcli-" + marker();
  std::filesystem::create_directories(dir);
  std::string cmd = std::string(MOXI_BINARY_DIR) + "/moxi";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " >" + dir + "/out 2>" + dir + "/err";
  cli_result r;
  int st = std::system(cmd.c_str());
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  r.out = slurp(dir + "/out");
  r.err = slurp(dir + "/err");
  std::filesystem::remove_all(dir);
  return r;
}

TEST(SandboxCli, RunPrintsStreamsAndASummaryAndExitsWithTheStatus) {
  std::string log = "/tmp/moxi-sbcli-audit-" + marker() + ".jsonl";
  auto r = run_cli({"sandbox", "run", "--timeout", "5", "--memory", "64", "--pids", "16", "--audit-log", log,
                    "--env", "GREETING=hi", "--", "sh", "-c", "echo $GREETING; echo oops >&2; exit 3"});
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, "hi\n");
  EXPECT_EQ(r.err.rfind("oops\n", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("moxi sandbox: exit=3 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("limit=none"), std::string::npos) << r.err;
  std::ifstream in(log);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(nlohmann::json::parse(line)["limits"]["memory_bytes"], 64ull << 20);
  std::filesystem::remove(log);

  r = run_cli({"sandbox", "run", "--timeout", "0.3", "--", "sleep", "5"});
  EXPECT_EQ(r.status, 137);
  EXPECT_NE(r.err.find("limit=timeout"), std::string::npos) << r.err;

  r = run_cli({"sandbox", "run", "--workspace", "/etc", "--", "true"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("moxi: error: sandbox: refusing workspace '/etc'"), std::string::npos) << r.err;
}

TEST(SandboxCli, BenchReportsRatesMeasuredInOneRun) {
  auto r = run_cli({"bench", "sandbox", "--n", "4", "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n"], 4);
  for (const char* k :
       {"plain_per_s", "sandbox_c1_per_s", "sandbox_c2_per_s", "overhead_ratio", "scaling_c2"})
    EXPECT_GT(j[k].get<double>(), 0) << k;
  // A sandboxed run does strictly more work than a bare fork+exec.
  EXPECT_GT(j["overhead_ratio"].get<double>(), 1.0);
}

}  // namespace
}  // namespace moxi::sandbox::test
