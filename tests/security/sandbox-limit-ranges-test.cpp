// Issue 14/B6: numeric limits overflowed (--timeout 1e10 killed after 5 ms, --cpu 1e300 gave instant
// SIGXCPU, --tmp-size 1e300 or 1e-7 a host-sized /tmp, --pids 4294967295 wrapped to 1). Every limit is
// now range-checked in the library (check_limits, run) and in the CLI, and the largest accepted values
// behave as limits, not as wrapped small ones.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <functional>
#include <limits>

#include "moxi/base/error.h"
#include "sandbox-util.h"

namespace moxi::sandbox::sectest {
namespace {

struct bad_limit {
  const char* field;
  std::function<void(limits&)> set;
};

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

std::vector<bad_limit> bad_limits() {
  return {
      {"timeout_s", [](limits& l) { l.timeout_s = 1e10; }},
      {"timeout_s", [](limits& l) { l.timeout_s = kNaN; }},
      {"timeout_s", [](limits& l) { l.timeout_s = kInf; }},
      {"timeout_s", [](limits& l) { l.timeout_s = -1; }},
      {"timeout_s", [](limits& l) { l.timeout_s = 0; }},
      {"cpu_s", [](limits& l) { l.cpu_s = 1e300; }},
      {"cpu_s", [](limits& l) { l.cpu_s = kNaN; }},
      {"cpu_s", [](limits& l) { l.cpu_s = -0.5; }},
      {"memory_bytes", [](limits& l) { l.memory_bytes = 1; }},
      {"memory_bytes", [](limits& l) { l.memory_bytes = UINT64_MAX; }},
      {"pids", [](limits& l) { l.pids = 4294967295u; }},
      {"pids", [](limits& l) { l.pids = 4294967294u; }},
      {"pids", [](limits& l) { l.pids = (1u << 22) - 1; }},  // + bwrap's 2 > PID_MAX_LIMIT
      {"file_size_bytes", [](limits& l) { l.file_size_bytes = UINT64_MAX; }},
      {"output_bytes", [](limits& l) { l.output_bytes = UINT64_MAX; }},
      {"open_files", [](limits& l) { l.open_files = 0; }},
      {"open_files", [](limits& l) { l.open_files = 4294967295u; }},
      {"tmp_bytes", [](limits& l) { l.tmp_bytes = 0; }},
      {"tmp_bytes", [](limits& l) { l.tmp_bytes = UINT64_MAX; }},
      {"tmp_bytes", [](limits& l) { l.tmp_bytes = 1; }},
      {"shm_bytes", [](limits& l) { l.shm_bytes = 0; }},
      {"shm_bytes", [](limits& l) { l.shm_bytes = UINT64_MAX; }},
      {"workspace_bytes", [](limits& l) { l.workspace_bytes = UINT64_MAX; }},
      {"workspace_bytes", [](limits& l) { l.workspace_bytes = 100; }},
      {"workspace_inodes", [](limits& l) { l.workspace_inodes = 0; }},
      {"workspace_inodes", [](limits& l) { l.workspace_inodes = UINT64_MAX; }},
  };
}

TEST(SandboxLimitRanges, TheLibraryRefusesEveryOutOfRangeLimitByName) {
  EXPECT_NO_THROW(check_limits(limits{}));
  for (const auto& b : bad_limits()) {
    limits l;
    b.set(l);
    try {
      check_limits(l);
      ADD_FAILURE() << b.field << " accepted";
    } catch (const moxi::error& e) {
      EXPECT_NE(std::string(e.what()).find(b.field), std::string::npos) << e.what();
    }
    // run() checks before anything is created or started.
    run_spec s;
    s.argv = {"true"};
    s.limits = l;
    EXPECT_THROW(run(s), moxi::error) << b.field;
  }
  EXPECT_EQ(test::live_children(), 0);
}

TEST(SandboxLimitRanges, TheLargestAcceptedValuesAreLimitsNotWrappedSmallOnes) {
  limits edge;
  edge.timeout_s = 1e6;
  edge.cpu_s = 1e6;
  edge.pids = (1u << 22) - 2;
  edge.memory_bytes = 1ull << 40;
  edge.tmp_bytes = 1ull << 40;
  edge.shm_bytes = 4096;
  // Raising the hard limit needs CAP_SYS_RESOURCE, which containers often drop: at most the current one.
  struct rlimit nofile;
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &nofile), 0);
  edge.open_files = uint32_t(std::min<rlim_t>(1u << 20, nofile.rlim_max));
  EXPECT_NO_THROW(check_limits(edge));
  run_spec s;
  s.argv = {"sh", "-c",
            "sleep 0.2; i=0; while [ $i -lt 20 ]; do sleep 0 & i=$((i+1)); done; wait; echo done"};
  s.limits = edge;
  s.limits.shm_bytes = 1 << 20;
  s.limits.use_cgroup = test::expected_mechanism("pids") != "rlimit";
  auto r = run(s);
  EXPECT_TRUE(r.ok()) << r.error << r.err.data;
  EXPECT_EQ(r.out.data, "done\n");
  EXPECT_EQ(r.fired, limit_kind::none);
}

TEST(SandboxLimitRanges, TheCliRefusesOutOfRangeValuesBeforeRunning) {
  scratch_dir s;
  const std::string w = s.dir("w", 0700);
  const std::vector<std::vector<std::string>> bad = {
      {"--timeout", "1e10"},
      {"--timeout", "nan"},
      {"--cpu", "1e300"},
      {"--cpu", "inf"},
      {"--tmp-size", "1e300"},
      {"--tmp-size", "1e-7"},
      {"--tmp-size", "0"},
      {"--memory", "1e-9"},
      {"--memory", "1e300"},
      {"--pids", "4294967295"},
      {"--pids", "4294967296"},
      {"--file-size", "1e30"},
      {"--shm-size", "0"},
      {"--shm-size", "1e300"},
      {"--workspace-size", "1e300"},
      {"--workspace-inodes", "0"},
      {"--output-limit", "18446744073709551615"},
  };
  for (const auto& opt : bad) {
    std::vector<std::string> args = {"sandbox", "run", "-q", "--workspace", w};
    args.insert(args.end(), opt.begin(), opt.end());
    args.insert(args.end(), {"--", "touch", "ran"});
    auto c = run_moxi(args);
    EXPECT_NE(c.status, 0) << opt[0] << " " << opt[1];
    EXPECT_FALSE(test::path_exists(w + "/ran")) << opt[0] << " " << opt[1] << " ran the command";
    std::error_code ec;
    std::filesystem::remove(w + "/ran", ec);
  }
  // The control: the same command with valid options does run.
  EXPECT_EQ(run_moxi({"sandbox", "run", "-q", "--workspace", w, "--", "touch", "ran"}).status, 0);
  EXPECT_TRUE(test::path_exists(w + "/ran"));
  // The options themselves work: a long timeout does not kill a short command.
  auto c = run_moxi(
      {"sandbox", "run", "-q", "--timeout", "1e6", "--cpu", "1e6", "--", "sh", "-c", "sleep 0.1; echo ok"});
  EXPECT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.out, "ok\n");
}

}  // namespace
}  // namespace moxi::sandbox::sectest
