// decode() against Pillow (tests/image/pillow-reference.py): every PNG color type and bit depth, tRNS,
// Adam7, JPEG subsamplings, progressive, grayscale, CMYK and all eight EXIF orientations, pixel for pixel.
#include <gtest/gtest.h>

#include <fstream>

#include "common/temp-dir.h"
#include "image/reference.h"
#include "moxi/base/error.h"
#include "moxi/image/image.h"

namespace moxi::image {
namespace {

using testing::reference_case;

const std::vector<reference_case>& cases() {
  static moxi::testing::temp_dir dir("moxi-image-decode");
  static const std::vector<reference_case> all = testing::run_reference("decode", dir.path());
  return all;
}

void expect_matches(const std::string& prefix) {
  int checked = 0;
  for (const auto& c : cases()) {
    if (c.name.rfind(prefix, 0) != 0) continue;
    SCOPED_TRACE(c.name);
    ++checked;
    rgb_image img;
    ASSERT_NO_THROW(img = decode(c.in, {}, c.name));
    EXPECT_EQ(img.width, c.fields.at(0));
    EXPECT_EQ(img.height, c.fields.at(1));
    // Exact: PNG decoding is lossless, and Pillow decodes JPEGs with the same libjpeg-turbo and the same
    // settings (islow IDCT, fancy upsampling).
    EXPECT_TRUE(img.rgb == c.out) << testing::describe_diff(img, c.out);
  }
  EXPECT_GT(checked, 10) << prefix;
}

TEST(ImageDecode, png_matches_pillow) {
  expect_matches("png-");
}

TEST(ImageDecode, jpeg_matches_pillow) {
  expect_matches("jpeg-");
}

TEST(ImageDecode, exif_orientation_swaps_sides_for_transposes) {
  for (int o = 1; o <= 8; ++o) {
    const auto& c = testing::find_case(cases(), "jpeg-exif-" + std::to_string(o));
    const rgb_image img = decode(c.in);
    EXPECT_EQ(img.width, o >= 5 ? 12 : 20) << o;
    EXPECT_EQ(img.height, o >= 5 ? 20 : 12) << o;
  }
}

class ImageReadFile : public moxi::testing::temp_dir_test {};

TEST_F(ImageReadFile, reads_then_decodes_and_names_the_path) {
  const auto& c = testing::find_case(cases(), "png-rgba");
  const std::string p = path("a.png");
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(c.in.data()), c.in.size());
  EXPECT_EQ(read_file(p).rgb, c.out);

  try {
    read_file(path("missing.png"));
    ADD_FAILURE() << "no error";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.png"), std::string::npos) << e.what();
  }
  try {
    read_file(dir_);
    ADD_FAILURE() << "no error";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  // Refused from its size before being read.
  try {
    read_file(p, {.max_bytes = 100});
    ADD_FAILURE() << "no error";
  } catch (const moxi::error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(p + ": ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("over the limit of 100 bytes"), std::string::npos) << e.what();
  }
}

TEST(ImageContentHash, depends_on_pixels_and_shape_only) {
  const auto& png = testing::find_case(cases(), "png-rgb");
  const rgb_image a = decode(png.in);
  rgb_image b = a;
  EXPECT_EQ(content_hash(a), content_hash(b));
  b.rgb[100] ^= 1;
  EXPECT_NE(content_hash(a), content_hash(b));
  rgb_image c = a;
  std::swap(c.width, c.height);
  EXPECT_NE(content_hash(a), content_hash(c));
}

}  // namespace
}  // namespace moxi::image
