// The sandbox benchmark (see sandbox-bench.h). The three rates are measured back to back in one process
// so that their ratios are meaningful on a shared machine even when absolute times are not.
#include "bench/sandbox-bench.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/sandbox/pool.h"
#include "moxi/sandbox/sandbox.h"

extern char** environ;

namespace moxi::bench {
namespace {

double plain_rate(int n) {
  char arg0[] = "/bin/true";
  char* argv[] = {arg0, nullptr};
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    pid_t pid;
    if (posix_spawn(&pid, arg0, nullptr, nullptr, argv, environ) != 0)
      throw error("bench: cannot spawn /bin/true");
    int status;
    waitpid(pid, &status, 0);
  }
  return n / seconds_since(t0);
}

}  // namespace

sandbox_bench_result run_sandbox_bench(int n) {
  if (n < 1) throw error("bench sandbox: --n must be >= 1");
  // One workspace per worker, reused: the figure is the launcher's cost, not mkdtemp's.
  std::string base =
      std::filesystem::temp_directory_path() / ("moxi-bench-sandbox-" + std::to_string(getpid()));
  struct cleanup {
    std::string dir;
    ~cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } clean{base};
  sandbox::run_spec spec;
  spec.argv = {"true"};
  spec.limits.timeout_s = 10;
  auto spec_for = [&](int i) {
    sandbox::run_spec s = spec;
    s.workspace = base + "/w" + std::to_string(i % 2);
    s.shared_workspace = true;  // the pool's two workers may both pick the same one
    return s;
  };
  sandbox_bench_result r;
  r.n = n;
  // Warm-up: page cache, the seccomp compile, the cgroup hierarchy.
  for (int i = 0; i < 3; ++i) {
    auto res = sandbox::run(spec_for(i));
    if (!res.ok()) throw error("bench sandbox: `true` failed in the sandbox: " + res.error + res.err.data);
    r.mechanisms = "memory=" + res.mechanisms.memory + " pids=" + res.mechanisms.pids;
  }
  r.plain_per_s = plain_rate(n);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) sandbox::run(spec_for(0));
  r.c1_per_s = n / seconds_since(t0);
  {
    sandbox::pool p(2, 4);
    std::vector<sandbox::run_spec> specs;
    for (int i = 0; i < n; ++i) specs.push_back(spec_for(i));
    t0 = std::chrono::steady_clock::now();
    auto results = p.run_all(std::move(specs));
    r.c2_per_s = n / seconds_since(t0);
    for (const auto& res : results)
      if (!res.ok()) throw error("bench sandbox: a concurrent run failed: " + res.error + res.err.data);
  }
  r.overhead_ratio = r.plain_per_s / r.c1_per_s;
  r.overhead_ms = (1.0 / r.c1_per_s - 1.0 / r.plain_per_s) * 1e3;
  r.scaling_c2 = r.c2_per_s / r.c1_per_s;
  return r;
}

void add_sandbox_bench(CLI::App& bench) {
  struct options {
    int n = 50;
    bool json = false;
  };
  auto o = std::make_shared<options>();
  auto* cmd = bench.add_subcommand(
      "sandbox", "Sandboxed executions/s of `true` at concurrency 1 and 2 vs plain fork+exec");
  cmd->add_option("--n", o->n, "Executions per measurement")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print one JSON object instead of text");
  cmd->callback([o] {
    auto r = run_sandbox_bench(o->n);
    if (o->json) {
      nlohmann::json j = {{"bench", "sandbox"},
                          {"n", r.n},
                          {"plain_per_s", r.plain_per_s},
                          {"sandbox_c1_per_s", r.c1_per_s},
                          {"sandbox_c2_per_s", r.c2_per_s},
                          {"overhead_ratio", r.overhead_ratio},
                          {"overhead_ms", r.overhead_ms},
                          {"scaling_c2", r.scaling_c2},
                          {"mechanisms", r.mechanisms}};
      std::printf("%s\n", j.dump().c_str());
      return;
    }
    std::printf("sandbox bench: n=%d, command `true`, limits via %s\n", r.n, r.mechanisms.c_str());
    std::printf("  unsandboxed fork+exec : %8.1f exec/s\n", r.plain_per_s);
    std::printf("  sandboxed, 1 at a time: %8.1f exec/s  (%.1fx slower, +%.2f ms per exec)\n", r.c1_per_s,
                r.overhead_ratio, r.overhead_ms);
    std::printf("  sandboxed, 2 workers  : %8.1f exec/s  (%.2fx the 1-worker rate)\n", r.c2_per_s,
                r.scaling_c2);
  });
}

}  // namespace moxi::bench
