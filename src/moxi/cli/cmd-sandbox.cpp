// `moxi sandbox run [limits] -- CMD...`: runs one command in the sandbox for people; prints the command's
// stdout/stderr, a one-line summary on stderr, and exits with the command's exit status.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/base/interrupt.h"
#include "moxi/cli/command.h"
#include "moxi/cli/options.h"
#include "moxi/sandbox/sandbox.h"

namespace moxi::cli {
namespace {

struct sandbox_options {
  sandbox::run_spec spec;
  double memory_mb = 512, file_size_mb = 64, tmp_mb = 64, shm_mb = 16, workspace_mb = 256;
  std::vector<std::string> env, ro_binds;
  std::string stdin_file;
  bool quiet = false;
  bool no_cgroup = false;
};

void write_all(FILE* f, const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), f);
  std::fflush(f);
}

std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 20))
    std::snprintf(buf, sizeof buf, "%.1fMiB", b / 1048576.0);
  else if (b >= 1024)
    std::snprintf(buf, sizeof buf, "%.1fKiB", b / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%lluB", static_cast<unsigned long long>(b));
  return buf;
}

// MiB as given on the command line to bytes. The double is checked before the conversion (a value past
// 2^64 or a NaN would be undefined behaviour), and a positive value must not round to 0, which means
// "no limit" for some options; the library then checks the byte count against the limit's range.
uint64_t mib_to_bytes(const char* option, double mib) {
  if (!std::isfinite(mib) || mib < 0 || mib > 1099511627776.0)  // 2^40 MiB = 1 EiB
    throw error(std::string(option) + " " + std::to_string(mib) + ": expected 0 to 2^40 MiB");
  const double bytes = std::round(mib * 1048576.0);
  if (mib > 0 && bytes < 1)
    throw error(std::string(option) + " " + std::to_string(mib) + ": positive but less than one byte");
  return static_cast<uint64_t>(bytes);
}

[[noreturn]] void run_command(sandbox_options& o) {
  auto& spec = o.spec;
  spec.limits.memory_bytes = mib_to_bytes("--memory", o.memory_mb);
  spec.limits.file_size_bytes = mib_to_bytes("--file-size", o.file_size_mb);
  spec.limits.tmp_bytes = mib_to_bytes("--tmp-size", o.tmp_mb);
  spec.limits.shm_bytes = mib_to_bytes("--shm-size", o.shm_mb);
  spec.limits.workspace_bytes = mib_to_bytes("--workspace-size", o.workspace_mb);
  sandbox::check_limits(spec.limits);
  spec.limits.use_cgroup = !o.no_cgroup;
  for (const auto& kv : o.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw error("--env '" + kv + "': expected KEY=VALUE");
    spec.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& b : o.ro_binds) {
    auto colon = b.find(':');
    std::string host = b.substr(0, colon), inside = colon == std::string::npos ? host : b.substr(colon + 1);
    if (host.empty() || host[0] != '/' || inside.empty() || inside[0] != '/')
      throw error("--ro-bind '" + b + "': expected /HOST[:/INSIDE]");
    spec.policy.ro_binds.emplace_back(host, inside);
  }
  if (!o.stdin_file.empty()) {
    std::ifstream in(o.stdin_file, std::ios::binary);
    if (!in) throw error("--stdin-file '" + o.stdin_file + "': cannot be read");
    std::stringstream ss;
    ss << in.rdbuf();
    spec.stdin_data = ss.str();
  }
  sandbox::run_result r = sandbox::run(spec);
  // Whatever was captured is shown, also when the command never started (then it is bwrap's message).
  write_all(stdout, r.out.data);
  write_all(stderr, r.err.data);
  if (!r.started) throw error(r.error);
  if (!r.error.empty()) std::fprintf(stderr, "moxi sandbox: %s\n", r.error.c_str());
  if (!o.quiet) {
    std::string hit;
    for (auto k : r.hit) hit += std::string(hit.empty() ? "" : ",") + sandbox::to_string(k);
    std::fprintf(stderr,
                 "moxi sandbox: exit=%d signal=%d limit=%s hit=%s duration=%.3fs cpu=%.3fs peak_mem=%s "
                 "stdout=%s%s stderr=%s%s memory=%s pids=%s cpu_limit=%s disk=%s uid=%u workspace=%s\n",
                 r.exit_code, r.signal, sandbox::to_string(r.fired), hit.empty() ? "none" : hit.c_str(),
                 r.duration_s, r.cpu_s, human_bytes(r.peak_memory_bytes).c_str(),
                 human_bytes(r.out.bytes).c_str(), r.out.truncated ? "(truncated)" : "",
                 human_bytes(r.err.bytes).c_str(), r.err.truncated ? "(truncated)" : "",
                 r.mechanisms.memory.c_str(), r.mechanisms.pids.c_str(), r.mechanisms.cpu.c_str(),
                 r.mechanisms.disk.c_str(), static_cast<unsigned>(r.uid), r.workspace.c_str());
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::exit(r.exit_code);
}

void setup(CLI::App& root) {
  auto* sb = root.add_subcommand("sandbox", "Run untrusted commands in moxi's sandbox (docs/sandbox.md)");
  sb->require_subcommand(1);
  auto opts = std::make_shared<sandbox_options>();
  auto* run = sb->add_subcommand("run", "Run CMD in a fresh sandbox and exit with its status");
  auto& s = opts->spec;
  run->add_option("--workspace", s.workspace,
                  "Host directory mounted writable at --workspace-mount (default: a temporary one)");
  run->add_flag("--keep-workspace", s.keep_workspace, "Keep the temporary workspace after the run");
  run->add_option("--workspace-mount", s.policy.workspace_mount,
                  "Where the workspace appears inside (also HOME and the working directory)")
      ->capture_default_str();
  run->add_option("--timeout", s.limits.timeout_s, "Wall-clock limit in seconds (kills the whole tree)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  run->add_option("--cpu", s.limits.cpu_s, "CPU-time limit in seconds (0 = none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--memory", opts->memory_mb, "Memory limit in MiB (0 = none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--pids", s.limits.pids, "Process/thread limit (0 = none)")
      ->capture_default_str()
      ->check(integer_in(0, UINT32_MAX));
  run->add_option("--file-size", opts->file_size_mb, "Largest file the command may write, MiB (0 = none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--output-limit", s.limits.output_bytes, "Captured bytes per stream; the rest is discarded")
      ->capture_default_str()
      ->check(unsigned_integer());
  run->add_option("--tmp-size", opts->tmp_mb, "Size of the private /tmp in MiB")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--shm-size", opts->shm_mb, "Size of the private /dev/shm in MiB")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--workspace-size", opts->workspace_mb,
                  "Workspace byte budget in MiB (0 = write the host directory directly, no budget)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  run->add_option("--workspace-inodes", s.limits.workspace_inodes,
                  "Workspace inode budget (files + directories)")
      ->capture_default_str()
      ->check(integer_in(1, INT64_MAX));
  run->add_flag("--shared-workspace", s.shared_workspace,
                "Allow other runs to use the same --workspace at the same time");
  run->add_option("--audit-log", s.audit_log, "Append one JSON line describing the run to this file");
  run->add_option("--id", s.id, "Episode id recorded in the audit log");
  run->add_option("--env", opts->env, "KEY=VALUE added to the clean environment (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--ro-bind", opts->ro_binds, "/HOST[:/INSIDE] extra read-only bind (repeatable)")
      ->allow_extra_args(false);
  bool* use_cgroup_off = &opts->no_cgroup;
  run->add_flag("--no-cgroup", *use_cgroup_off, "Enforce memory/pids/CPU with rlimits only");
  run->add_flag("--allow-inet", s.policy.allow_inet, "Allow AF_INET/AF_INET6 sockets (own loopback only)");
  run->add_option("--stdin-file", opts->stdin_file, "Feed this file to the command's stdin");
  run->add_flag("-q,--quiet", opts->quiet, "No summary line on stderr");
  run->add_option("command", s.argv, "The command and its arguments (after --)")->required();
  set_examples(run,
               {"moxi sandbox run -- python3 -c 'print(1 + 1)'",
                "moxi sandbox run --timeout 5 --memory 256 --workspace /tmp/ws --audit-log audit.jsonl -- sh "
                "-c 'ls -la'"},
               "docs/sandbox.md");
  set_examples(sb, {"moxi sandbox run -- python3 -c 'print(1 + 1)'"}, "docs/sandbox.md");
  run->callback([opts] {
    interrupt_guard stop_cleanly;  // SIGINT/SIGTERM: the run is killed, its temporary workspace removed
    run_command(*opts);
  });
}

MOXI_COMMAND("sandbox", setup);

}  // namespace
}  // namespace moxi::cli
