// Test scaffolding for vision-encoder tests: images as patch grids of seeded N(0, 1) pixel values (what
// preprocessing would hand the encoder, without a picture behind them), and their model::image_input views.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "moxi/model/vision.h"

namespace moxi::testing {

struct patch_image {
  int64_t gh = 0, gw = 0;     // patches per column / row
  std::vector<float> pixels;  // f32 [gh * gw, 3, patch, patch]
};

inline patch_image random_patch_image(int64_t gh, int64_t gw, uint64_t seed, int64_t patch = 14) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0, 1);
  patch_image im{gh, gw, std::vector<float>(size_t(gh * gw * 3 * patch * patch))};
  for (auto& e : im.pixels) e = nd(rng);
  return im;
}

inline std::vector<model::image_input> image_inputs(const std::vector<patch_image>& images) {
  std::vector<model::image_input> in;
  for (const auto& im : images) in.push_back({im.gh, im.gw, im.pixels});
  return in;
}

}  // namespace moxi::testing
