// `moxi bench sandbox`: sandboxed executions per second of a trivial command at concurrency 1 and 2, and
// the overhead over a plain fork+exec measured in the same run.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace moxi::bench {

struct sandbox_bench_result {
  int n = 0;                  // executions per measurement
  double plain_per_s = 0;     // unsandboxed fork+exec+wait of the same command
  double c1_per_s = 0;        // sandbox::run, one at a time
  double c2_per_s = 0;        // sandbox::pool with 2 workers
  double overhead_ratio = 0;  // plain_per_s / c1_per_s: how many times slower one sandboxed run is
  double overhead_ms = 0;     // added latency per execution at concurrency 1
  double scaling_c2 = 0;      // c2_per_s / c1_per_s
  std::string mechanisms;     // how memory/pids/cpu limits were enforced
};

sandbox_bench_result run_sandbox_bench(int n);

// Adds the `sandbox` subcommand to the `moxi bench` command.
void add_sandbox_bench(CLI::App& bench);

}  // namespace moxi::bench
