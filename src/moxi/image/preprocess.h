// Decoded RGB to the pixel patches a MoonViT / Kimi-VL vision encoder takes: Kimi-VL's
// KimiVLImageProcessor (pad_input=False) with Pillow-exact bicubic resizing; docs/vision.md "##
// Preprocessing".
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "moxi/image/image.h"

namespace moxi::image {

struct preprocess_config {
  int64_t patch_size = 14;
  int64_t merge_kernel = 2;       // grid sides must be multiples of this
  int64_t in_token_limit = 4096;  // max patches per image before merging (Kimi-VL's default)
  std::array<float, 3> mean{0.48145466f, 0.4578275f, 0.40821073f};  // CLIP / Kimi-VL values
  std::array<float, 3> std{0.26862954f, 0.26130258f, 0.27577711f};
};

struct patches {
  int64_t grid_h = 0, grid_w = 0;  // patches per column / row
  std::vector<float> pixels;       // f32 [grid_h * grid_w, 3, patch, patch], patches in row-major grid order
  int64_t tokens(int64_t merge) const { return grid_h * grid_w / (merge * merge); }
};

// Resizes to fit the token limit, center-crops to whole merge blocks, normalizes and patchifies. Images
// whose shorter side is under patch_size * merge_kernel are first upscaled to that (moxi's addition).
// Throws moxi::error for a bad config or an image whose patch grid would exceed the position table
// (512 patches per side).
patches preprocess(const rgb_image& img, const preprocess_config& cfg = {});

// Pillow's Image.resize(size, Image.BICUBIC) on 8-bit RGB, bit for bit (Pillow 9.4's Resample.c algorithm):
// antialiased cubic (a = -0.5), fixed-point coefficients, horizontal pass then vertical, each rounded to u8.
rgb_image resize_bicubic(const rgb_image& img, int64_t width, int64_t height);

}  // namespace moxi::image
