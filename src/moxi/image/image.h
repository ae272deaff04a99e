// Untrusted PNG/JPEG bytes to 8-bit RGB pixels: the decoding front of the vision input path (docs/vision.md
// "## Preprocessing"). Faces hostile uploads: every failure is a moxi::error, limits are checked from the
// header before the pixel buffer exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moxi::image {

// u8 [height, width, 3], row-major RGB.
struct rgb_image {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
};

struct decode_limits {
  size_t max_bytes = 32u << 20;     // encoded size
  int64_t max_pixels = 64ll << 20;  // width * height, checked from the header before decoding (bombs)
  int64_t max_side = 32768;
};

// Detects PNG or JPEG by magic bytes and decodes to RGB: alpha (and PNG tRNS) composited onto white, 16-bit
// samples cut to their high byte, JPEG EXIF orientation applied (as Pillow's ImageOps.exif_transpose),
// CMYK/YCCK JPEGs converted as Pillow does. Anything else, or truncated, corrupt or over-limit data, throws
// moxi::error whose message starts with `what` + ": " and says what is wrong; never crashes or exits.
// Keeps no state: safe to call from several threads at once.
rgb_image decode(std::span<const uint8_t> bytes, const decode_limits& limits = {},
                 const std::string& what = "image");

// The same for bytes held in a string (a file read whole, a base64-decoded data: URL, a task's picture).
rgb_image decode(std::string_view bytes, const decode_limits& limits = {}, const std::string& what = "image");

// Reads `path` (refusing files over limits.max_bytes before reading them), then decode() with the path as
// `what`.
rgb_image read_file(const std::string& path, const decode_limits& limits = {});

// PNG bytes of an 8-bit RGB image (what the vision tasks store); decode(encode_png(img)) == img.
std::string encode_png(const rgb_image& img);

// XXH3-64 of the decoded pixels and their dimensions: equal images (whatever their encoding) hash equal, so
// callers can cache per-image work, e.g. the vision encoder's output.
uint64_t content_hash(const rgb_image& img);

}  // namespace moxi::image
