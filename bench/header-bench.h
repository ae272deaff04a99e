// `moxi bench header`: how fast a safetensors header with as many tensors as the seed checkpoint (502,524)
// is opened and validated, at several sizes (tensors/s should stay flat as n grows: the parse is
// O(n log n)), against a bare nlohmann DOM parse of the same JSON measured in the same run.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace moxi::bench {

// Writes a valid safetensors file with n one-byte U8 tensors named like a sharded MoE checkpoint's
// ("model.layers.L.mlp.experts.E.wK.weight_blocks" ...), laid out in name order.
void write_synthetic_header_file(const std::string& path, int64_t n);

struct header_bench_row {
  int64_t tensors = 0;
  uint64_t header_bytes = 0;
  double open_s = 0;         // safetensors_file::open (mmap, parse, every check), best of the runs
  double bare_parse_s = 0;   // nlohmann::json::parse of the header text alone, best of the runs
  double tensors_per_s = 0;  // tensors / open_s
  double vs_bare_parse = 0;  // open_s / bare_parse_s
};

// One row per size in `sizes` (files written under dir, removed afterwards); `runs` timings each.
std::vector<header_bench_row> run_header_bench(const std::vector<int64_t>& sizes, int runs,
                                               const std::string& dir);

// Adds the `header` subcommand to the `moxi bench` command.
void add_header_bench(CLI::App& bench);

}  // namespace moxi::bench
