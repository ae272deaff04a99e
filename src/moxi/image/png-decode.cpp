// PNG decoding with libpng: every color type and bit depth to 8-bit RGB, alpha composited onto white.
// libpng reports errors by longjmp, which may only cross frames without destructors: the functions that
// call setjmp below hold plain data only, and every C++ object (buffers, the libpng structs' owner) lives
// in their callers.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "moxi/base/error.h"
#include "moxi/image/decode-internal.h"

namespace moxi::image::detail {
namespace {

// Plain data shared with libpng's callbacks.
struct png_reader {
  png_structp png = nullptr;
  png_infop info = nullptr;
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  bool truncated = false;
  char message[256] = {};
};

struct png_header {
  uint32_t width = 0, height = 0;
  int channels = 0;  // after the transforms: 3 (RGB) or 4 (RGBA)
  int bit_depth = 0;
  size_t rowbytes = 0;
  int passes = 1;  // 7 for Adam7 interlacing
};

void on_error(png_structp png, png_const_charp message) {
  auto* r = static_cast<png_reader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // libpng would print them; benign problems stay quiet

void on_read(png_structp png, png_bytep out, size_t n) {
  auto* r = static_cast<png_reader*>(png_get_io_ptr(png));
  if (n > r->size - r->pos) {
    r->truncated = true;
    png_error(png, "unexpected end of data");
  }
  std::memcpy(out, r->data + r->pos, n);
  r->pos += n;
}

// Owns the libpng structs on the C++ side, so they are freed on every path out of decode_png.
struct png_owner {
  png_reader* r;
  ~png_owner() { png_destroy_read_struct(&r->png, r->info ? &r->info : nullptr, nullptr); }
};

// Reads the chunks up to the first IDAT and sets the transforms to 8-bit RGB or RGBA. False on a libpng
// error (the message is in r.message).
bool read_header(png_reader& r, png_header& h) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  png_set_read_fn(r.png, &r, on_read);
  // Bounds what ancillary chunks may allocate (zTXt/iCCP bombs); none of them matters for the pixels, so
  // the ones with payloads libpng would decompress or keep are skipped unread.
  png_set_chunk_malloc_max(r.png, 8u << 20);
  png_set_chunk_cache_max(r.png, 1000);
  static const png_byte skipped[] = {'i', 'C', 'C', 'P', 0, 'i', 'T', 'X', 't', 0, 's', 'P', 'L', 'T', 0,
                                     't', 'E', 'X', 't', 0, 'z', 'T', 'X', 't', 0, 'e', 'X', 'I', 'f', 0};
  png_set_keep_unknown_chunks(r.png, PNG_HANDLE_CHUNK_NEVER, skipped, sizeof skipped / 5);
  png_read_info(r.png, r.info);
  h.width = png_get_image_width(r.png, r.info);
  h.height = png_get_image_height(r.png, r.info);
  const int color = png_get_color_type(r.png, r.info);
  const int depth = png_get_bit_depth(r.png, r.info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r.png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(r.png);
  if (png_get_valid(r.png, r.info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(r.png);
  // The high byte, as Pillow's 16-bit RGB/RGBA unpackers do (png_set_scale_16 would round instead).
  if (depth == 16) png_set_strip_16(r.png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(r.png);
  h.passes = png_set_interlace_handling(r.png);
  png_read_update_info(r.png, r.info);
  h.channels = png_get_channels(r.png, r.info);
  h.bit_depth = png_get_bit_depth(r.png, r.info);
  h.rowbytes = png_get_rowbytes(r.png, r.info);
  return true;
}

// Decodes every row into `out` (u8 [height, width, 3]). RGBA goes through `scratch`: one row when the
// image is not interlaced, the whole image when it is (Adam7 passes fill rows in several visits).
bool read_pixels(png_reader& r, const png_header& h, uint8_t* out, uint8_t* scratch) {
  if (setjmp(png_jmpbuf(r.png))) return false;
  const size_t w = h.width;
  const bool rgba = h.channels == 4;
  if (h.passes == 1) {
    for (uint32_t y = 0; y < h.height; ++y) {
      png_bytep row = rgba ? scratch : out + y * w * 3;
      png_read_row(r.png, row, nullptr);
      if (rgba) composite_on_white(scratch, out + y * w * 3, static_cast<int64_t>(w));
    }
  } else {
    uint8_t* image = rgba ? scratch : out;
    for (int pass = 0; pass < h.passes; ++pass) {
      for (uint32_t y = 0; y < h.height; ++y) png_read_row(r.png, image + y * h.rowbytes, nullptr);
    }
    if (rgba) composite_on_white(scratch, out, static_cast<int64_t>(w) * h.height);
  }
  // No png_read_end: like Pillow, the image is complete once its last IDAT (and that chunk's CRC, which
  // libpng checks with the last row) has been read; what follows cannot change the pixels.
  return true;
}

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

rgb_image decode_png(std::span<const uint8_t> bytes, const decode_limits& limits, const std::string& what) {
  // The IHDR must come first (offset 8); its size is checked before libpng sees anything, so an absurd
  // header gets the same message whatever libpng's own limits are.
  if (bytes.size() >= 24 && std::memcmp(bytes.data() + 12, "IHDR", 4) == 0) {
    check_dimensions(be32(bytes.data() + 16), be32(bytes.data() + 20), limits, what, "PNG");
  }
  png_reader r;
  r.data = bytes.data();
  r.size = bytes.size();
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
  if (!r.png) fail(what, "out of memory while decoding PNG");
  png_owner owner{&r};
  r.info = png_create_info_struct(r.png);
  if (!r.info) fail(what, "out of memory while decoding PNG");
  auto libpng_failed = [&]() {
    if (r.truncated) fail(what, "truncated PNG: the data ends after " + std::to_string(r.size) + " bytes");
    fail(what, std::string("corrupt PNG: ") + r.message);
  };

  png_header h;
  if (!read_header(r, h)) libpng_failed();
  check_dimensions(h.width, h.height, limits, what, "PNG");
  if (h.bit_depth != 8 || (h.channels != 3 && h.channels != 4) ||
      h.rowbytes != size_t{h.width} * static_cast<size_t>(h.channels)) {
    fail(what, "unsupported PNG layout (" + std::to_string(h.channels) + " channels of " +
                   std::to_string(h.bit_depth) + " bits after conversion)");
  }
  rgb_image img;
  img.width = h.width;
  img.height = h.height;
  img.rgb.resize(size_t{h.width} * h.height * 3);
  std::vector<uint8_t> scratch;
  if (h.channels == 4) scratch.resize(h.rowbytes * (h.passes == 1 ? 1 : h.height));
  if (!read_pixels(r, h, img.rgb.data(), scratch.data())) libpng_failed();
  return img;
}

}  // namespace moxi::image::detail
