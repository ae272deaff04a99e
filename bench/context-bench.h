// `moxi bench context --config FILE --contexts 4096,32768,131072`: long context on a random-weight model of
// the config. One chunked prefill walks to the longest context, timing every chunk (the per-token cost
// curve: at most linear in the position, the DSA indexer scan being the only term that grows); at each
// context it times decode steps (against the first context's rate and the roofline at the bandwidth
// sampled beside them) and reads the process's resident and peak memory, against what `moxi plan` predicts
// for one device at that context with the engine's f32 caches (docs/plan.md). With --rounds, decode at the
// first and the longest context is then measured again in alternating rounds (paired_rounds).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace moxi::bench {

struct context_bench_options {
  std::string config;
  std::vector<int64_t> contexts = {4096, 32768, 131072};
  int64_t chunk = 2048;  // prefill tokens per forward
  int64_t tokens = 16;   // timed decode steps at each context
  std::string keep_dir;  // reuse/keep the generated checkpoint here
  double probe_mib = 0;  // bandwidth probe buffer; 0: max(512 MiB, 8x the LLC)
  int64_t rounds = 0;    // paired rounds of the first and the longest context after the sweep (0: none)
};

// Decode at the first and at the longest context measured in alternating rounds (each `tokens` steps after
// one untimed step), so that both rates see the same host: on a shared machine the sweep's points are
// minutes apart and the bandwidth moves by 2x between them.
struct paired_rounds {
  int64_t first_context = 0, last_context = 0;  // cache lengths when the rounds began
  std::vector<double> first_tokens_per_s, last_tokens_per_s, membw_gbs;  // one per round
  double ratio_median = 0, ratio_min = 0, ratio_max = 0;                 // last / first, per round
  bool empty() const { return first_tokens_per_s.empty(); }
};

struct context_point {
  int64_t context = 0;              // tokens in the cache when the decode steps start
  double prefill_ms_per_token = 0;  // of the prefill chunk that ended here
  double decode_tokens_per_s = 0;   // batch 1
  double decode_vs_first = 0;       // over the first context's rate
  double membw_gbs = 0;             // read bandwidth sampled beside the decode steps
  double bytes_per_token = 0;       // planner: weights + cache a decoded token reads at this context
  double share_of_roofline = 0;     // decode_tokens_per_s / (membw / bytes_per_token)
  // The model's and caches' share of VmRSS now, and of VmHWM since loading ended (prefill chunks included).
  double resident_mb = 0, peak_mb = 0;
  double plan_mb = 0;  // planner: weights + one sequence's f32 caches at this context
};

struct context_bench_result {
  std::string config, backend;
  int threads = 0;
  double init_s = 0, load_s = 0, prefill_s = 0;
  double loaded_mb = 0, load_peak_mb = 0;  // the model's share of VmRSS after loading, and its peak during it
  int64_t chunk = 0, tokens = 0;
  std::vector<std::pair<int64_t, double>> prefill_curve;  // (position at the chunk's end, ms per token)
  double fit_ms = 0,
         fit_ms_per_k = 0;  // least squares: ms per token = fit_ms + fit_ms_per_k * position / 1000
  std::vector<context_point> points;
  paired_rounds paired;  // rounds == 0: empty
};

context_bench_result run_context_bench(const context_bench_options& opts);

void add_context_bench(CLI::App& bench);

}  // namespace moxi::bench
