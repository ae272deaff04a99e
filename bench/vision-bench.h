// `moxi bench vision [--config FILE] [--sizes 448,1024]`: the vision encoder + projector of a config (the
// seed's MoonViT by default) with random BF16 weights (only the vision tensors are generated), images/s at
// each square image size, and its GFLOP/s as a share of the compute peak measured in the same run; the
// scalar reference against the fast path on one small image in the same run.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace moxi::bench {

struct vision_bench_options {
  std::string config = "configs/seed-2.8t.json";
  std::vector<int64_t> sizes = {448, 1024};  // square images, pixels per side
  int reps = 1;                              // timed encodes per size (median)
  int64_t ref_size = 112;                    // the reference's image side (0: no reference run)
};

struct vision_bench_size {
  int64_t pixels = 0, grid_h = 0, grid_w = 0, tokens = 0;  // patches per side, placeholder tokens
  double gflop = 0;                                        // per image (matmuls and attention products)
  double seconds = 0, images_per_s = 0, gflops = 0, share_of_peak = 0;
};

struct vision_bench_result {
  std::string config, backend, peak_kind;
  int threads = 0;
  int64_t tower_params = 0, projector_params = 0;
  double init_s = 0, load_s = 0, peak_gflops = 0;
  std::vector<vision_bench_size> sizes;
  // The reference and the fast path on one ref_size x ref_size image.
  int64_t ref_pixels = 0;
  double ref_seconds = 0, ref_fast_seconds = 0, speedup_vs_ref = 0;
};

vision_bench_result run_vision_bench(const vision_bench_options& o);

void add_vision_bench(CLI::App& bench);

}  // namespace moxi::bench
