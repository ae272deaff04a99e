// resize_bicubic against Pillow's Image.resize(size, BICUBIC), bit for bit, and preprocess() against
// Kimi-VL's preprocessing recomputed in plain Python (tests/image/pillow-reference.py), to 1e-6.
#include "moxi/image/preprocess.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/temp-dir.h"
#include "image/reference.h"
#include "moxi/base/error.h"

namespace moxi::image {
namespace {

using testing::reference_case;

rgb_image raw_image(const reference_case& c) {
  rgb_image img;
  img.width = c.fields.at(0);
  img.height = c.fields.at(1);
  img.rgb = c.in;
  return img;
}

rgb_image noise(int64_t w, int64_t h, uint32_t seed) {
  rgb_image img{w, h, std::vector<uint8_t>(static_cast<size_t>(w * h * 3))};
  for (auto& b : img.rgb) b = static_cast<uint8_t>((seed = seed * 1664525u + 1013904223u) >> 24);
  return img;
}

std::string error_of(const rgb_image& img, const preprocess_config& cfg = {}) {
  try {
    preprocess(img, cfg);
  } catch (const moxi::error& e) {
    return e.what();
  }
  return "";
}

TEST(ImageResize, matches_pillow_bicubic_exactly) {
  moxi::testing::temp_dir dir("moxi-image-resize");
  const auto cases = testing::run_reference("resize", dir.path());
  EXPECT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const rgb_image out = resize_bicubic(raw_image(c), c.fields.at(2), c.fields.at(3));
    EXPECT_EQ(out.width, c.fields.at(2));
    EXPECT_EQ(out.height, c.fields.at(3));
    EXPECT_TRUE(out.rgb == c.out) << testing::describe_diff(out, c.out);
  }
}

TEST(ImageResize, same_size_is_a_copy_and_bad_sizes_are_errors) {
  const rgb_image img = noise(5, 4, 1);
  EXPECT_EQ(resize_bicubic(img, 5, 4).rgb, img.rgb);
  EXPECT_THROW(resize_bicubic(img, 0, 4), moxi::error);
  EXPECT_THROW(resize_bicubic(img, 5, -1), moxi::error);
  EXPECT_THROW(resize_bicubic(rgb_image{5, 4, {}}, 2, 2), moxi::error);
}

TEST(ImagePreprocess, matches_kimi_vl_reference) {
  moxi::testing::temp_dir dir("moxi-image-preprocess");
  const auto cases = testing::run_reference("preprocess", dir.path());
  EXPECT_GE(cases.size(), 8u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    preprocess_config cfg;
    cfg.patch_size = c.fields.at(2);
    cfg.merge_kernel = c.fields.at(3);
    cfg.in_token_limit = c.fields.at(4);
    const patches got = preprocess(raw_image(c), cfg);
    ASSERT_EQ(got.grid_h, c.fields.at(5));
    ASSERT_EQ(got.grid_w, c.fields.at(6));
    EXPECT_EQ(got.grid_h % cfg.merge_kernel, 0);
    EXPECT_EQ(got.grid_w % cfg.merge_kernel, 0);
    EXPECT_LE(got.grid_h * got.grid_w, std::max<int64_t>(cfg.in_token_limit, 4));
    const size_t n = static_cast<size_t>(got.grid_h * got.grid_w * 3 * cfg.patch_size * cfg.patch_size);
    ASSERT_EQ(got.pixels.size(), n);
    ASSERT_EQ(c.out.size(), n * sizeof(double));
    double max_err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < n; ++i) {
      double want;
      std::memcpy(&want, c.out.data() + i * sizeof(double), sizeof want);
      const double err = std::abs(double{got.pixels[i]} - want);
      if (err > max_err) max_err = err, worst = i;
    }
    EXPECT_LE(max_err, 1e-6) << "at element " << worst;
  }
}

TEST(ImagePreprocess, tokens_count_merged_patches) {
  const patches p = preprocess(noise(100, 61, 2));  // crop to 84 x 56: a 4 x 6 grid
  EXPECT_EQ(p.grid_h, 4);
  EXPECT_EQ(p.grid_w, 6);
  EXPECT_EQ(p.tokens(2), 6);
}

TEST(ImagePreprocess, refuses_what_the_position_table_cannot_hold) {
  // Kimi-VL: 100 x 9000 is scaled to 95 x 8592, cropped to 84 x 8596: 614 patches high.
  EXPECT_NE(error_of(noise(100, 9000, 3)).find("position table"), std::string::npos);
  // Upscaled to 28 x 11200 first, refused before that resize.
  EXPECT_NE(error_of(noise(1, 400, 4)).find("position table"), std::string::npos);
  EXPECT_NE(error_of(noise(400, 1, 5)).find("position table"), std::string::npos);
  // The largest strip that fits: 28 x 7140 is 510 patches.
  EXPECT_EQ(error_of(noise(28, 7140, 6)), "");
}

TEST(ImagePreprocess, refuses_bad_config_and_images) {
  EXPECT_NE(error_of(noise(30, 30, 7), {.patch_size = 0}).find("invalid config"), std::string::npos);
  EXPECT_NE(error_of(noise(30, 30, 7), {.merge_kernel = 0}).find("invalid config"), std::string::npos);
  EXPECT_NE(error_of(noise(30, 30, 7), {.in_token_limit = 0}).find("invalid config"), std::string::npos);
  EXPECT_NE(error_of(rgb_image{3, 3, std::vector<uint8_t>(5)}).find("invalid image"), std::string::npos);
  EXPECT_NE(error_of(rgb_image{}).find("invalid image"), std::string::npos);
}

}  // namespace
}  // namespace moxi::image
