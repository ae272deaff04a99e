// Hostile image input: every malformed or oversized file is refused with a moxi::error that starts with the
// caller's name for the image and names the problem; absurd sizes are refused from the header, before any
// pixel buffer exists (a 100000 x 100000 buffer would not fit in memory).
#include <gtest/gtest.h>

#include <chrono>

#include "common/temp-dir.h"
#include "image/hostile-bytes.h"
#include "image/reference.h"
#include "moxi/base/error.h"
#include "moxi/image/image.h"

namespace moxi::image {
namespace {

using testing::reference_case;

const std::vector<reference_case>& seeds() {
  static moxi::testing::temp_dir dir("moxi-image-hostile");
  static const std::vector<reference_case> all = testing::run_reference("seeds", dir.path());
  return all;
}

const std::vector<uint8_t>& seed(const std::string& name) {
  return testing::find_case(seeds(), name).in;
}

// The message of the moxi::error decode() throws ("" when it returns an image).
std::string error_of(const std::vector<uint8_t>& bytes, const decode_limits& limits = {}) {
  try {
    decode(bytes, limits, "image 2");
  } catch (const moxi::error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("image 2: ", 0), 0u) << m;
    return m;
  }
  return "";
}

::testing::AssertionResult contains(const std::string& message, const std::string& needle) {
  if (message.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message '" << message << "' lacks '" << needle << "'";
}

#define EXPECT_ERROR_HAS(message, needle) EXPECT_TRUE(contains(message, needle))

template <size_t N>
std::vector<uint8_t> text(const char (&s)[N]) {  // with embedded NULs, without the terminating one
  return std::vector<uint8_t>(s, s + N - 1);
}

TEST(ImageHostile, empty_and_foreign_formats) {
  EXPECT_ERROR_HAS(error_of({}), "empty (0 bytes)");
  EXPECT_ERROR_HAS(error_of(text("GIF89a\x01\x00\x01\x00")), "GIF images are not supported");
  EXPECT_ERROR_HAS(error_of(text("RIFF\x10\0\0\0WEBPVP8 ")), "WebP images are not supported");
  EXPECT_ERROR_HAS(error_of(text("hello world")), "not a PNG or JPEG image (it starts with bytes 68 65 6c");
  EXPECT_ERROR_HAS(error_of(text("\x89PN")), "truncated PNG: only 3 bytes");
  EXPECT_ERROR_HAS(error_of(text("\xff\xd8")), "truncated JPEG: only 2 bytes");
  EXPECT_ERROR_HAS(error_of(text("\x89PNG\r\n\x1a\nthis is not a chunk at all")), "PNG");
}

TEST(ImageHostile, truncated_png_at_every_cut) {
  for (const char* name : {"seed-png-rgb", "seed-png-rgba-interlaced", "seed-png-palette"}) {
    const auto& full = seed(name);
    ASSERT_EQ(error_of(full), "") << name;
    // Everything up to the end of the last IDAT (12 bytes of IEND follow) is needed for the pixels.
    for (size_t cut = 1; cut + 12 < full.size(); ++cut) {
      const std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<ptrdiff_t>(cut));
      EXPECT_ERROR_HAS(error_of(part), "truncated PNG") << name << " cut at " << cut;
    }
    // Without its IEND the image is still complete, as for Pillow.
    EXPECT_EQ(error_of(std::vector<uint8_t>(full.begin(), full.end() - 12)), "") << name;
  }
}

TEST(ImageHostile, truncated_jpeg_at_every_cut) {
  for (const char* name :
       {"seed-jpeg-baseline", "seed-jpeg-progressive", "seed-jpeg-exif", "seed-jpeg-gray"}) {
    const auto& full = seed(name);
    ASSERT_EQ(error_of(full), "") << name;
    // Even a missing EOI is refused: libjpeg would pad the image with gray.
    for (size_t cut = 1; cut < full.size(); ++cut) {
      const std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<ptrdiff_t>(cut));
      EXPECT_ERROR_HAS(error_of(part), "truncated JPEG") << name << " cut at " << cut;
    }
  }
}

TEST(ImageHostile, png_crc_and_zlib_corruption) {
  const auto& good = seed("seed-png-rgb");
  const auto chunks = testing::png_chunks(good);
  const auto& idat = testing::first_chunk(chunks, "IDAT");
  const auto& ihdr = testing::first_chunk(chunks, "IHDR");

  auto bad = good;
  bad[idat.crc()] ^= 1;
  EXPECT_ERROR_HAS(error_of(bad), "corrupt PNG: IDAT: CRC error");
  bad = good;
  bad[ihdr.crc()] ^= 1;
  EXPECT_ERROR_HAS(error_of(bad), "corrupt PNG: IHDR: CRC error");
  // Damaged pixel data: zlib's Adler-32 notices before the chunk's CRC is read.
  bad = good;
  bad[idat.data() + idat.length / 2] ^= 0x40;
  EXPECT_ERROR_HAS(error_of(bad), "corrupt PNG: IDAT: incorrect data check");
  // Behind a valid CRC: a broken zlib header, then a bad Adler-32 checksum at the end of the stream.
  bad = good;
  bad[idat.data()] = 0x77;
  testing::fix_png_crcs(bad);
  EXPECT_ERROR_HAS(error_of(bad), "corrupt PNG: IDAT:");
  bad = good;
  bad[idat.crc() - 1] ^= 0xff;
  testing::fix_png_crcs(bad);
  EXPECT_ERROR_HAS(error_of(bad), "corrupt PNG");
  // A bad IHDR field (color type 5 does not exist).
  bad = good;
  bad[ihdr.data() + 9] = 5;
  testing::fix_png_crcs(bad);
  EXPECT_ERROR_HAS(error_of(bad), "corrupt PNG");
}

TEST(ImageHostile, jpeg_corrupt_huffman_data) {
  // A run of 0xff data bytes (stuffed as ff 00) is a run of all-ones Huffman codes, which no table holds.
  // libjpeg-turbo decodes them silently and loses sync, finishing the image early: the bytes left before
  // EOI give it away. (JPEG has no checksum: a damaged file that stays in sync decodes to other pixels.)
  auto bad = seed("seed-jpeg-large");
  const size_t sos = testing::jpeg_marker(bad, 0xda);
  const size_t data = sos + 2 + ((size_t{bad[sos + 2]} << 8) | bad[sos + 3]);
  const size_t mid = data + (bad.size() - 2 - data) / 2;
  for (size_t i = 0; i < 64; i += 2) bad[mid + i] = 0xff, bad[mid + i + 1] = 0x00;
  EXPECT_ERROR_HAS(error_of(bad), "corrupt JPEG: Corrupt JPEG data: ");
  EXPECT_ERROR_HAS(error_of(bad), "extraneous bytes before marker 0xd9");
  // A marker inside the entropy-coded data.
  bad = seed("seed-jpeg-large");
  bad[mid] = 0xff, bad[mid + 1] = 0xd0 + 3;
  EXPECT_ERROR_HAS(error_of(bad), "corrupt JPEG: Corrupt JPEG data: ");
  // A table missing: the DQT segment renamed to an APP segment. (Missing Huffman tables are not an error:
  // libjpeg-turbo falls back to the standard ones, for Motion-JPEG.)
  bad = seed("seed-jpeg-baseline");
  bad[testing::jpeg_marker(bad, 0xdb) + 1] = 0xe5;
  EXPECT_ERROR_HAS(error_of(bad), "corrupt JPEG: Quantization table 0x00 was not defined");
}

TEST(ImageHostile, jpeg_scan_bomb) {
  // A valid progressive 16 x 16 grayscale JPEG, then a Huffman table with the single code "0" (DC
  // difference 0) and 600 more DC scans of 4 blocks each (4 zero bits, padded with ones): a legal
  // progression that libjpeg would decode scan after scan; each scan of a big image walks all its blocks.
  auto bomb = seed("seed-jpeg-gray-progressive");
  ASSERT_EQ(error_of(bomb), "");
  ASSERT_GT(bomb.size(), 2u);
  bomb.erase(bomb.end() - 2, bomb.end());  // EOI
  const std::vector<uint8_t> dht = {0xff, 0xc4, 0x00, 0x14, 0x00, 1, 0, 0, 0, 0, 0,
                                    0,    0,    0,    0,    0,    0, 0, 0, 0, 0, 0};
  bomb.insert(bomb.end(), dht.begin(), dht.end());
  const std::vector<uint8_t> scan = {0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x00, 0x00, 0x0f};
  auto with_scans = [&](int n) {
    auto b = bomb;
    for (int i = 0; i < n; ++i) b.insert(b.end(), scan.begin(), scan.end());
    b.push_back(0xff), b.push_back(0xd9);
    return b;
  };
  EXPECT_EQ(error_of(with_scans(100)), "");  // the construction is valid
  EXPECT_ERROR_HAS(error_of(with_scans(600)), "corrupt JPEG: more than 500 scans");
}

TEST(ImageHostile, absurd_png_header_is_refused_before_allocating) {
  auto bad = seed("seed-png-rgb");
  const auto chunks = testing::png_chunks(bad);
  const auto& ihdr = testing::first_chunk(chunks, "IHDR");
  testing::put_be32(&bad[ihdr.data()], 100000);
  testing::put_be32(&bad[ihdr.data() + 4], 100000);
  testing::fix_png_crcs(bad);
  EXPECT_ERROR_HAS(error_of(bad),
                   "PNG image is 100000 x 100000 pixels, over the limit of 32768 pixels per side");
  EXPECT_ERROR_HAS(error_of(bad, {.max_side = 1 << 20}),
                   "PNG image is 100000 x 100000 = 10000000000 pixels, over the limit of 67108864 pixels");
  // Beyond what the pre-check of the IHDR reads, libpng's own checks still hold.
  testing::put_be32(&bad[ihdr.data()], 0x80000000u);
  testing::fix_png_crcs(bad);
  EXPECT_ERROR_HAS(error_of(bad, {.max_pixels = int64_t{1} << 60, .max_side = int64_t{1} << 40}), "PNG");
  testing::put_be32(&bad[ihdr.data()], 0);
  testing::fix_png_crcs(bad);
  EXPECT_ERROR_HAS(error_of(bad), "PNG header declares an empty image (0 x 100000)");
}

TEST(ImageHostile, absurd_jpeg_header_is_refused_before_allocating) {
  auto bad = seed("seed-jpeg-baseline");
  const size_t sof = testing::jpeg_marker(bad, 0xc0);
  bad[sof + 5] = 65000 >> 8, bad[sof + 6] = 65000 & 0xff;  // height
  bad[sof + 7] = 65000 >> 8, bad[sof + 8] = 65000 & 0xff;  // width
  EXPECT_ERROR_HAS(error_of(bad),
                   "JPEG image is 65000 x 65000 pixels, over the limit of 32768 pixels per side");
  EXPECT_ERROR_HAS(error_of(bad, {.max_side = 1 << 20}),
                   "JPEG image is 65000 x 65000 = 4225000000 pixels, over the limit of 67108864 pixels");
  bad[sof + 5] = 0, bad[sof + 6] = 0;
  EXPECT_ERROR_HAS(error_of(bad), "corrupt JPEG");  // height 0 (a DNL marker) is not supported by libjpeg
}

TEST(ImageHostile, byte_and_pixel_budgets) {
  const auto& good = seed("seed-png-rgb");  // 16 x 12
  EXPECT_ERROR_HAS(error_of(good, {.max_bytes = 100}),
                   " bytes, over the limit of 100 bytes for an encoded image");
  EXPECT_ERROR_HAS(error_of(good, {.max_pixels = 191}),
                   "PNG image is 16 x 12 = 192 pixels, over the limit of 191");
  EXPECT_EQ(error_of(good, {.max_pixels = 192}), "");
  EXPECT_ERROR_HAS(error_of(good, {.max_side = 15}), "over the limit of 15 pixels per side");
  EXPECT_ERROR_HAS(error_of(seed("seed-jpeg-baseline"), {.max_pixels = 100}),
                   "JPEG image is 16 x 12 = 192 pixels");
}

TEST(ImageHostile, decompression_bomb_is_refused_from_the_header) {
  moxi::testing::temp_dir dir("moxi-image-bomb");
  const auto cases = testing::run_reference("bomb", dir.path());
  const auto& bomb = testing::find_case(cases, "bomb-png").in;
  EXPECT_LT(bomb.size(), 200000u);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_ERROR_HAS(error_of(bomb),
                   "PNG image is 9000 x 9000 = 81000000 pixels, over the limit of 67108864 pixels");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
}

}  // namespace
}  // namespace moxi::image
