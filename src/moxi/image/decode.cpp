// decode(): format detection, the limits every format shares, EXIF orientation and alpha compositing;
// read_file() and content_hash(). The format decoders live in png-decode.cpp and jpeg-decode.cpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string_view>

#include "moxi/base/error.h"
#include "moxi/image/decode-internal.h"
#include "moxi/image/image.h"

namespace moxi::image {
namespace detail {

void fail(const std::string& what, const std::string& message) {
  throw error(what + ": " + message);
}

void check_dimensions(int64_t width, int64_t height, const decode_limits& limits, const std::string& what,
                      const char* format) {
  const std::string dims = std::to_string(width) + " x " + std::to_string(height);
  if (width <= 0 || height <= 0)
    fail(what, std::string(format) + " header declares an empty image (" + dims + ")");
  if (width > limits.max_side || height > limits.max_side) {
    fail(what, std::string(format) + " image is " + dims + " pixels, over the limit of " +
                   std::to_string(limits.max_side) + " pixels per side");
  }
  // Both sides are at most max_side here and formats cap sides at 2^31, so the product cannot overflow.
  if (width * height > limits.max_pixels) {
    fail(what, std::string(format) + " image is " + dims + " = " + std::to_string(width * height) +
                   " pixels, over the limit of " + std::to_string(limits.max_pixels) + " pixels");
  }
}

void composite_on_white(const uint8_t* rgba, uint8_t* rgb, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t a = rgba[4 * i + 3];
    for (int c = 0; c < 3; ++c) {
      // (a*c + (255-a)*255) / 255 rounded half up; the quotient is never exactly .5 since 255 is odd.
      rgb[3 * i + c] = static_cast<uint8_t>((a * rgba[4 * i + c] + (255 - a) * 255 + 127) / 255);
    }
  }
}

rgb_image apply_orientation(rgb_image img, int orientation) {
  if (orientation < 2 || orientation > 8) return img;
  const int64_t w = img.width, h = img.height;
  // 5-8 swap the sides. Each case says where output pixel (x, y) comes from in the input, matching Pillow's
  // transpose methods: 2 FLIP_LEFT_RIGHT, 3 ROTATE_180, 4 FLIP_TOP_BOTTOM, 5 TRANSPOSE, 6 ROTATE_270,
  // 7 TRANSVERSE, 8 ROTATE_90 (Pillow's rotations are counter-clockwise).
  const bool swap = orientation >= 5;
  rgb_image out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.rgb.resize(img.rgb.size());
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      int64_t sx = x, sy = y;
      switch (orientation) {
        case 2:
          sx = w - 1 - x;
          break;
        case 3:
          sx = w - 1 - x, sy = h - 1 - y;
          break;
        case 4:
          sy = h - 1 - y;
          break;
        case 5:
          sx = y, sy = x;
          break;
        case 6:
          sx = y, sy = h - 1 - x;
          break;
        case 7:
          sx = w - 1 - y, sy = h - 1 - x;
          break;
        case 8:
          sx = w - 1 - y, sy = x;
          break;
      }
      std::memcpy(&out.rgb[3 * (y * out.width + x)], &img.rgb[3 * (sy * w + sx)], 3);
    }
  }
  return out;
}

}  // namespace detail

namespace {

constexpr std::string_view kPngMagic("\x89PNG\r\n\x1a\n", 8);
constexpr std::string_view kJpegMagic("\xff\xd8\xff", 3);

bool starts_with(std::span<const uint8_t> bytes, std::string_view magic) {
  return bytes.size() >= magic.size() && std::memcmp(bytes.data(), magic.data(), magic.size()) == 0;
}

// A name for formats people commonly upload, so that the error says what was sent instead of only what
// was expected.
std::string other_format(std::span<const uint8_t> b) {
  auto at = [&](size_t off, std::string_view s) {
    return b.size() >= off + s.size() && std::memcmp(b.data() + off, s.data(), s.size()) == 0;
  };
  if (at(0, "GIF87a") || at(0, "GIF89a")) return "GIF";
  if (at(0, "RIFF") && at(8, "WEBP")) return "WebP";
  if (at(0, std::string_view("II*\0", 4)) || at(0, std::string_view("MM\0*", 4))) return "TIFF";
  if (at(4, "ftypavif") || at(4, "ftypheic") || at(4, "ftypmif1")) return "AVIF/HEIF";
  if (at(0, "BM")) return "BMP";
  if (at(0, "<svg") || at(0, "<?xml")) return "SVG";
  if (at(0, std::string_view("\xff\x0a", 2)) || at(4, "jP  ")) return "JPEG XL/JPEG 2000";
  return "";
}

std::string hex_prefix(std::span<const uint8_t> b) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < b.size() && i < 8; ++i) {
    if (i) s += ' ';
    s += digits[b[i] >> 4];
    s += digits[b[i] & 15];
  }
  return s;
}

}  // namespace

rgb_image decode(std::string_view bytes, const decode_limits& limits, const std::string& what) {
  return decode(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), limits, what);
}

rgb_image decode(std::span<const uint8_t> bytes, const decode_limits& limits, const std::string& what) {
  if (bytes.size() > limits.max_bytes) {
    detail::fail(what, std::to_string(bytes.size()) + " bytes, over the limit of " +
                           std::to_string(limits.max_bytes) + " bytes for an encoded image");
  }
  if (bytes.empty()) detail::fail(what, "empty (0 bytes), expected a PNG or JPEG image");
  try {
    if (starts_with(bytes, kPngMagic)) return detail::decode_png(bytes, limits, what);
    if (starts_with(bytes, kJpegMagic)) return detail::decode_jpeg(bytes, limits, what);
  } catch (const std::bad_alloc&) {
    detail::fail(what, "out of memory while decoding");
  }
  for (auto [magic, name] : {std::pair{kPngMagic, "PNG"}, std::pair{kJpegMagic, "JPEG"}}) {
    if (bytes.size() < magic.size() && std::memcmp(bytes.data(), magic.data(), bytes.size()) == 0) {
      detail::fail(what,
                   std::string("truncated ") + name + ": only " + std::to_string(bytes.size()) + " bytes");
    }
  }
  const std::string other = other_format(bytes);
  if (!other.empty()) detail::fail(what, other + " images are not supported, only PNG and JPEG");
  detail::fail(what, "not a PNG or JPEG image (it starts with bytes " + hex_prefix(bytes) + ")");
}

rgb_image read_file(const std::string& path, const decode_limits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error("open", path, errno);
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw io_error("stat", path, errno);
  if (!S_ISREG(st.st_mode)) detail::fail(path, "not a regular file");
  // Refused before reading, so a huge file costs nothing; the read below still stops at max_bytes + 1 in case
  // the file grows meanwhile, and decode() then refuses it.
  if (static_cast<uint64_t>(st.st_size) > limits.max_bytes) {
    detail::fail(path, std::to_string(st.st_size) + " bytes, over the limit of " +
                           std::to_string(limits.max_bytes) + " bytes for an encoded image");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size) + 1);
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error("read", path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return decode(bytes, limits, path);
}

uint64_t content_hash(const rgb_image& img) {
  // The dimensions seed the pixel hash: a 2 x 3 and a 3 x 2 image with the same bytes differ.
  const int64_t dims[2] = {img.width, img.height};
  return XXH3_64bits_withSeed(img.rgb.data(), img.rgb.size(), XXH3_64bits(dims, sizeof dims));
}

}  // namespace moxi::image
