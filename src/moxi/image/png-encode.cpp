// PNG encoding with libpng (8-bit RGB, no interlacing): generated pictures of the vision tasks are stored
// as PNG bytes (docs/tasks.md). Errors longjmp out of libpng; the function that calls setjmp holds plain
// data only, the output string lives in the caller.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <string>

#include "moxi/base/error.h"
#include "moxi/image/image.h"

namespace moxi::image {
namespace {

struct png_writer {
  png_structp png = nullptr;
  png_infop info = nullptr;
  std::string* out = nullptr;
  char message[256] = {};
};

void on_error(png_structp png, png_const_charp message) {
  auto* w = static_cast<png_writer*>(png_get_error_ptr(png));
  std::snprintf(w->message, sizeof w->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

void on_write(png_structp png, png_bytep data, size_t n) {
  static_cast<png_writer*>(png_get_io_ptr(png))->out->append(reinterpret_cast<const char*>(data), n);
}

void on_flush(png_structp) {}

// True when written; false with w.message set when libpng failed.
bool write_rows(png_writer& w, const rgb_image& img) {
  if (setjmp(png_jmpbuf(w.png))) return false;
  png_set_write_fn(w.png, &w, on_write, on_flush);
  png_set_IHDR(w.png, w.info, png_uint_32(img.width), png_uint_32(img.height), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(w.png, w.info);
  for (int64_t y = 0; y < img.height; ++y)
    png_write_row(w.png, const_cast<png_bytep>(img.rgb.data() + y * img.width * 3));
  png_write_end(w.png, w.info);
  return true;
}

}  // namespace

std::string encode_png(const rgb_image& img) {
  if (img.width <= 0 || img.height <= 0 || img.width > (1 << 20) || img.height > (1 << 20) ||
      img.rgb.size() != size_t(img.width * img.height * 3))
    throw error("encode_png: an image of " + std::to_string(img.width) + " x " + std::to_string(img.height) +
                " with " + std::to_string(img.rgb.size()) + " bytes");
  std::string out;
  png_writer w;
  w.out = &out;
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w, on_error, on_warning);
  if (!w.png) throw error("encode_png: out of memory");
  w.info = png_create_info_struct(w.png);
  const bool has_info = w.info != nullptr;
  const bool ok = has_info && write_rows(w, img);
  png_destroy_write_struct(&w.png, &w.info);
  if (!ok) throw error(std::string("encode_png: ") + (has_info ? w.message : "out of memory"));
  return out;
}

}  // namespace moxi::image
