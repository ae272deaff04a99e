// --tp --ep --pp for the model commands, and the per-rank report of a multi-process run.
#include "moxi/dist/flags.h"

#include <cstdio>
#include <fstream>

#include "moxi/dist/mpi.h"

namespace moxi::dist {

void parallel_flags::add(CLI::App* cmd) {
  cmd->add_option("--tp", sizes.tp, "tensor-parallel ranks (attention heads, dense and shared FFN); run under mpirun")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--ep", sizes.ep, "expert-parallel ranks (routed experts, all-to-all); run under mpirun")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--pp", sizes.pp, "pipeline stages (contiguous layer ranges); run under mpirun")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--pp-microbatch", sizes.pp_microbatch,
                  "tokens per micro-batch of a forward across pipeline stages, which then work at once "
                  "(0: the whole forward at once)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--rank-timeout", rank_timeout,
                  "under mpirun: seconds a rank waits for the others in one exchange before it ends the job "
                  "(a rank died or hangs; 0: wait forever)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
}

void parallel_flags::loaded() const {
  if (!running()) return;
  barrier();
  watch_calls(rank_timeout);
}

bool parallel_flags::distributed() const {
  return sizes.tp > 1 || sizes.ep > 1 || sizes.pp > 1 || launched_by_mpi();
}

model::load_options parallel_flags::load_options() const {
  model::load_options o;
  if (distributed()) o.parallel = start(sizes);
  return o;
}

bool output_rank(const model::load_options& opts) { return !opts.parallel || opts.parallel->world_rank == 0; }

uint64_t resident_bytes() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("VmRSS:")) return uint64_t(std::stoull(line.substr(6))) * 1024;
  return 0;
}

void report_rank(const model::model& m, const std::string& what) {
  const model::parallel_layout* p = m.parallel();
  if (!p) return;
  const auto t = traffic_so_far();
  const auto [lo, hi] = model::parallel_layout::stage_layers(m.config().num_layers, p->sizes.pp, p->stage);
  std::fprintf(stderr,
               "%s: rank %d/%d (stage %d layers %lld-%lld, tp rank %d, ep rank %d): read %.2f MB of the checkpoint, "
               "resident %.1f MB, sent %.2f MB in %lld MPI calls, %.3f s in MPI\n",
               what.c_str(), p->world_rank, p->world_size, p->stage, (long long)lo, (long long)hi, p->tp_rank,
               p->ep_rank, double(m.checkpoint_bytes_read()) / 1e6, double(resident_bytes()) / 1e6,
               double(t.bytes_sent) / 1e6, (long long)t.calls, t.seconds);
}

}  // namespace moxi::dist
