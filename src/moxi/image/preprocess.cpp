// preprocess: Kimi-VL's KimiVLImageProcessor with pad_input=False (resize to the token limit, center-crop
// to whole merge blocks, CLIP normalization, patchify), plus moxi's upscale of images too small to crop.
#include "moxi/image/preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "moxi/base/error.h"

namespace moxi::image {
namespace {

// MoonViT's learned position table interpolates from a fixed grid; Kimi-VL refuses grids with a side of
// 512 patches or more ("Exceed pos emb").
constexpr int64_t kMaxGridSide = 512;

std::string dims(int64_t w, int64_t h) {
  return std::to_string(w) + " x " + std::to_string(h);
}

[[noreturn]] void too_long(const rgb_image& img, int64_t w, int64_t h, int64_t p) {
  throw error("image of " + dims(img.width, img.height) +
              " pixels: after resizing to the token limit it is " + dims(w, h) + " pixels, a " +
              dims(w / p, h / p) + " patch grid; the vision encoder's position table allows fewer than " +
              std::to_string(kMaxGridSide) + " patches per side (the aspect ratio is too extreme)");
}

}  // namespace

patches preprocess(const rgb_image& img, const preprocess_config& cfg) {
  const int64_t p = cfg.patch_size, merge = cfg.merge_kernel;
  if (p < 1 || p > 1024 || merge < 1 || merge > 64 || cfg.in_token_limit < 1) {
    throw error("preprocess: invalid config (patch_size " + std::to_string(p) + ", merge_kernel " +
                std::to_string(merge) + ", in_token_limit " + std::to_string(cfg.in_token_limit) + ")");
  }
  for (float s : cfg.std) {
    if (!(s > 0.0f) || !std::isfinite(s)) throw error("preprocess: invalid config (std must be positive)");
  }
  if (img.width <= 0 || img.height <= 0 || img.width > (1 << 24) || img.height > (1 << 24) ||
      img.rgb.size() != static_cast<size_t>(img.width * img.height * 3)) {
    throw error("preprocess: invalid image (" + dims(img.width, img.height) + " with " +
                std::to_string(img.rgb.size()) + " bytes)");
  }
  const int64_t unit = p * merge;  // crop granularity: whole merge blocks of patches

  // moxi's addition: Kimi-VL would crop an image with a side under one merge block to nothing. Upscale it
  // so that the shorter side is exactly one block, the other side in proportion (rounded half up, exact
  // integer arithmetic) and at least one block.
  rgb_image scaled;
  const rgb_image* cur = &img;
  if (img.width < unit || img.height < unit) {
    int64_t w = unit, h = unit;
    if (img.width <= img.height) {
      h = std::max(unit, (2 * img.height * unit + img.width) / (2 * img.width));
    } else {
      w = std::max(unit, (2 * img.width * unit + img.height) / (2 * img.height));
    }
    // Such a strip ends up at least this long on its long side whatever follows, so it is refused before
    // the (possibly huge) upscale rather than after.
    if (w / p >= kMaxGridSide || h / p >= kMaxGridSide) too_long(img, w, h, p);
    scaled = resize_bicubic(img, w, h);
    cur = &scaled;
  }

  // Kimi-VL: over the token limit (counted in whole patches), scale both sides by sqrt(limit / patches),
  // truncating, with Pillow's bicubic.
  {
    const int64_t w = cur->width, h = cur->height;
    const int64_t n = (w / p) * (h / p);
    if (n > cfg.in_token_limit) {
      const double scale = std::sqrt(static_cast<double>(cfg.in_token_limit) / static_cast<double>(n));
      const auto nw = static_cast<int64_t>(static_cast<double>(w) * scale);
      const auto nh = static_cast<int64_t>(static_cast<double>(h) * scale);
      if (nw < 1 || nh < 1) too_long(img, nw, nh, p);
      scaled = resize_bicubic(*cur, nw, nh);  // resize_bicubic reads *cur before `scaled` is assigned
      cur = &scaled;
    }
  }

  // Center crop to whole merge blocks.
  const int64_t w = cur->width, h = cur->height;
  const int64_t cw = w - w % unit, ch = h - h % unit;
  if (cw / p >= kMaxGridSide || ch / p >= kMaxGridSide || cw == 0 || ch == 0) too_long(img, cw, ch, p);
  const int64_t left = (w - cw) / 2, top = (h - ch) / 2;

  // x / 255 then (x - mean) / std in float32, as torchvision's to_tensor and normalize compute them; 256
  // values per channel, so a table.
  float table[3][256];
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) table[c][v] = (static_cast<float>(v) / 255.0f - cfg.mean[c]) / cfg.std[c];
  }

  patches out;
  out.grid_h = ch / p;
  out.grid_w = cw / p;
  out.pixels.resize(static_cast<size_t>(out.grid_h * out.grid_w * 3 * p * p));
  float* dst = out.pixels.data();
  for (int64_t gr = 0; gr < out.grid_h; ++gr) {
    for (int64_t gc = 0; gc < out.grid_w; ++gc) {
      for (int c = 0; c < 3; ++c) {
        for (int64_t y = 0; y < p; ++y) {
          const uint8_t* src =
              &cur->rgb[static_cast<size_t>(((top + gr * p + y) * w + left + gc * p) * 3 + c)];
          for (int64_t x = 0; x < p; ++x) *dst++ = table[c][src[3 * x]];
        }
      }
    }
  }
  return out;
}

}  // namespace moxi::image
