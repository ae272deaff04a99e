// `moxi bench decode | prefill --config FILE`: end-to-end tokens/s of a random-weight model generated from
// the config (moxi::model::init_checkpoint into a temp dir), with the fast kernels and, in the same run,
// the scalar reference (a kernels::backend_scope of the reference); decode also as a share of its roofline =
// read bandwidth measured in this run / bytes read per decoded token from the planner.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "moxi/dist/flags.h"

namespace moxi::bench {

struct model_bench_options {
  std::string config;
  int64_t prompt = 64;     // prefill: tokens per forward; decode: context before the timed steps
  int64_t tokens = 32;     // decode: timed steps
  int64_t ref_tokens = 4;  // tokens the reference runs (it is slow; its rate is per token either way)
  std::string keep_dir;    // reuse/keep the generated checkpoint here instead of a temp dir
  int64_t batch = 1;       // decode: also time this many sequences stepped together (model::forward_batch)
  // decode: also time a speculative step of K drafts (docs/speculative.md) and its speedup at `acceptance`
  int64_t draft_tokens = 0;
  double acceptance = 0.8;
  // MTP layers the generated checkpoint gets instead of the config's (-1: the config's), so that a config
  // without one can time --draft-tokens.
  int64_t mtp_layers = -1;
  // Across processes under mpirun (docs/distributed.md): every rank loads its share; rank 0 reports.
  dist::parallel_flags parallel;
};

// One rank's figures in a multi-process run.
struct rank_figures {
  double checkpoint_mb = 0;         // checkpoint bytes its loader read, MB
  double resident_mb = 0;           // VmRSS after loading, MB
  double loaded_mb = 0;             // VmRSS growth across model::load, MB: the rank's weights in memory
  double plan_mb = 0;               // moxi plan's weights per device of the rank's stage for this layout, MB
  double comm_bytes_per_token = 0;  // payload bytes it sent through MPI per decoded (or prefilled) token
  double comm_share = 0;            // share of the timed steps' wall time it spent inside MPI calls
};

struct model_bench_result {
  std::string mode;             // "decode" or "prefill"
  std::string config, backend;  // backend: the kernel backend the fast path ran on
  int threads = 0;
  double total_params = 0, active_params = 0;
  double init_s = 0, load_s = 0;
  int64_t prompt = 0, tokens = 0, ref_tokens = 0;
  double tokens_per_s = 0, ms_per_token = 0;
  double ref_tokens_per_s = 0, speedup_vs_ref = 0;
  // prefill only: 2 x active params per token as FLOP/s, against the BF16 compute peak measured in the same
  // run (kernels-bench.h compute_peak)
  double gflops = 0, peak_gflops = 0, share_of_peak = 0;
  std::string peak_kind;
  // decode only
  double bytes_per_token = 0;  // planner, batch 1 at the decode context
  double membw_gbs = 0, roofline_tokens_per_s = 0, share_of_roofline = 0;
  // decode with batch > 1: all sequences' tokens per second through forward_batch, and over batch 1
  int64_t batch = 1;
  double batch_tokens_per_s = 0, batch_speedup = 0;
  // decode with draft_tokens K > 0: a verify forward over K + 1 tokens under a cache trace (with its
  // rewind) and one MTP draft forward, in ms; the verify cost of each extra token as a share of a plain
  // step; tokens per step at the acceptance (1 + a + ... + a^K) and the speedup over plain decode there.
  int64_t draft_tokens = 0;
  double acceptance = 0;
  double verify_ms = 0, draft_ms = 0, extra_token_cost = 0, tokens_per_step = 0, speculative_speedup = 0;
  // Across processes: the layout and every rank's figures (rank 0's result only; the others print nothing).
  bool output = true;
  std::string layout;
  std::vector<rank_figures> ranks;
};

model_bench_result run_model_bench(const std::string& mode, const model_bench_options& opts);

void add_decode_bench(CLI::App& bench);
void add_prefill_bench(CLI::App& bench);

}  // namespace moxi::bench
