// `moxi bench membw | gemv | gemm | indexer | pool`: kernel benchmarks whose figures are ratios measured in
// the same run (docs/design.md §5): read bandwidth of the machine, MXFP4 GEMV and DSA indexer-scan bytes per
// second as a share of it, MXFP4 GEMM GFLOP/s as a share of a register-resident compute peak, each also
// against the scalar reference.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moxi::bench {

struct membw_result {
  int threads = 0;
  double buffer_mib = 0;
  double best_gbs = 0, median_gbs = 0;  // GB = 1e9 bytes
};
// Streams a buffer of `mib` MiB (far larger than the LLC) with every pool thread reading its own slice.
membw_result run_membw(double mib, int reps);

// A read-bandwidth probe that keeps its buffer, so a benchmark can sample the bandwidth between its own timed
// segments. On this shared host the bandwidth drifts by up to 1.7x within seconds (33 vs 56 GB/s in
// consecutive runs), so a share of the bandwidth is only meaningful against bandwidth read at the same time.
class membw_probe {
 public:
  // A buffer of max(512 MiB, 8x the LLC), faulted in by the threads that will read it.
  membw_probe();
  explicit membw_probe(double mib);
  ~membw_probe();
  membw_probe(const membw_probe&) = delete;
  membw_probe& operator=(const membw_probe&) = delete;
  double mib() const;
  // One pass of every pool thread over its slice; GB/s (1e9 bytes).
  double sample_gbs();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

double median(std::vector<double> v);

// Register-resident compute ceiling of this CPU on all pool threads in GFLOP/s, and which instruction it
// measured (the one the BF16/MXFP4 GEMMs issue: TDPBF16PS on AMX tiles, else VDPBF16PS).
std::pair<double, std::string> compute_peak();

struct gemv_result {
  int64_t m = 0, k = 0, tokens = 1;
  std::string variant;
  int copies = 0;             // weight copies rotated so every call reads from DRAM
  double weight_mib = 0;      // one copy, blocks + scales
  double fast_ms = 0;         // median time per call
  double classic_ms = 0;      // bf16: the row-layout kernel, same run (0: not measured)
  double weight_gbs = 0;      // bytes of one copy / fast_ms
  double membw_gbs = 0;       // median of the samples taken between the timed reps
  double share_of_membw = 0;  // median over reps of (rep's weight GB/s / the bandwidth sampled beside it)
  double ref_ms = 0, speedup_vs_ref = 0;
};
// format: "mxfp4" (kernels::matmul_mxfp4) or "bf16" (kernels::matmul_bf16, the dense layers).
// tokens: 1 to kernels::x86::kGemvMaxTokens rows of x per call.
gemv_result run_gemv(int64_t m, int64_t k, int reps, const std::string& format = "mxfp4", int64_t tokens = 1);

struct gemm_result {
  int64_t m = 0, k = 0, n = 0;
  std::string variant, peak_kind;
  double fast_ms = 0, gflops = 0;
  double peak_gflops = 0, share_of_peak = 0;
  double classic_ms = 0;  // bf16: the row-layout kernel, same run (0: not measured)
  double ref_ms = 0;      // extrapolated from ref_tokens tokens (the reference is linear in n)
  int64_t ref_tokens = 0;
  double speedup_vs_ref = 0;
};
// format "mxfp4" (the routed experts' GEMM, against compute_peak()) or "bf16" (the dense layers' kernel in
// the default backend's layout, against the fp32 FMA peak).
gemm_result run_gemm(int64_t m, int64_t k, int64_t n, int reps, const std::string& format = "mxfp4");

struct pool_result {
  int threads = 0;
  int64_t jobs = 0;
  double median_us = 0, p90_us = 0;  // one job whose every part runs on its own thread: wake, run, wait
};
// Round-trip cost of a thread-pool hand-off, what a kernel split must save to pay off.
pool_result run_pool(int64_t jobs);

struct indexer_result {
  int64_t keys = 0, heads = 0, dim = 0;
  int copies = 0;             // key-row copies rotated so every scan reads from DRAM
  double key_mib = 0;         // one copy: keys x ref::index_key_bytes(dim)
  double scores_ms = 0;       // median time of one decode step's scan (T = 1, all keys)
  double key_gbs = 0;         // bytes of one copy / scores_ms
  double membw_gbs = 0;       // median of the samples taken between the timed reps
  double share_of_membw = 0;  // median over reps of (rep's key GB/s / the bandwidth sampled beside it)
  double topk_ms = 0;         // median time of the top-k over the scan's scores
  int64_t topk = 0;
  double ref_ms = 0, speedup_vs_ref = 0;  // the scalar reference scan, one thread
};
// A decode step's DSA lightning indexer over `keys` cached FP8 keys (kernels::indexer_scores with T = 1,
// then indexer_topk): the scan reads every key once, so its key bytes per second against the read bandwidth
// says how close to memory-bound it is.
indexer_result run_indexer(int64_t keys, int64_t heads, int64_t dim, int64_t topk, int reps);

// Add the `membw`, `gemv`, `gemm`, `indexer` and `pool` subcommands to `moxi bench`.
void add_membw_bench(CLI::App& bench);
void add_gemv_bench(CLI::App& bench);
void add_gemm_bench(CLI::App& bench);
void add_indexer_bench(CLI::App& bench);
void add_pool_bench(CLI::App& bench);

}  // namespace moxi::bench
