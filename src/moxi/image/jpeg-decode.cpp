// JPEG decoding with libjpeg-turbo: grayscale, YCbCr, RGB and (as Pillow) Adobe CMYK/YCCK to 8-bit RGB,
// then the EXIF orientation (libexif) applied. libjpeg reports errors by longjmp, which may only cross
// frames without destructors: the functions that call setjmp below hold plain data only, and every C++
// object lives in their callers.
// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>
// clang-format on
#include <libexif/exif-data.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <memory>

#include "moxi/base/error.h"
#include "moxi/image/decode-internal.h"

namespace moxi::image::detail {
namespace {

// Legitimate progressive JPEGs have about ten scans; each scan walks every block of the image, so a file
// of thousands of tiny scans is a CPU bomb. libjpeg-turbo's own fuzzers stop at 500.
constexpr int kMaxScans = 500;

// Plain data shared with libjpeg's callbacks (through cinfo.client_data).
struct jpeg_reader {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr err;
  jpeg_progress_mgr progress;
  jmp_buf jump;
  bool created = false;
  bool truncated = false;
  char message[JMSG_LENGTH_MAX + 64] = {};
};

[[noreturn]] void bail_out(j_common_ptr c) {
  auto* r = static_cast<jpeg_reader*>(c->client_data);
  if (c->err->msg_code == JWRN_JPEG_EOF) r->truncated = true;
  (*c->err->format_message)(c, r->message);
  std::longjmp(r->jump, 1);
}

void on_error_exit(j_common_ptr c) {
  bail_out(c);
}

// Warnings mean the entropy-coded data is damaged (libjpeg then fills in gray and goes on) or the file
// ends early (libjpeg inserts a fake EOI). Pillow refuses a truncated file but shows damaged data; moxi
// refuses both, since the model would otherwise see an image that is not what was sent. libjpeg-turbo's
// fast Huffman path decodes invalid codes silently, so damage mostly shows as the decoder losing sync:
// leftover bytes before the next marker (JWRN_EXTRANEOUS_DATA) or a marker inside the data; those count
// as damage too. Warnings about metadata are ignored, as everyone does.
void on_message(j_common_ptr c, int level) {
  if (level != -1) return;  // trace messages
  switch (c->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_HIT_MARKER:
    case JWRN_EXTRANEOUS_DATA:
    case JWRN_MUST_RESYNC:
    case JWRN_NOT_SEQUENTIAL:
    case JWRN_BOGUS_PROGRESSION:
      bail_out(c);
    default:
      return;
  }
}

void on_output(j_common_ptr) {}  // libjpeg would print to stderr

void on_progress(j_common_ptr c) {
  auto* d = reinterpret_cast<j_decompress_ptr>(c);
  if (d->input_scan_number > kMaxScans) {
    auto* r = static_cast<jpeg_reader*>(c->client_data);
    std::snprintf(r->message, sizeof r->message, "more than %d scans", kMaxScans);
    std::longjmp(r->jump, 1);
  }
}

struct jpeg_owner {
  jpeg_reader* r;
  ~jpeg_owner() {
    if (r->created) jpeg_destroy_decompress(&r->cinfo);
  }
};

// Parses the markers up to the first scan, keeping APP1 (EXIF). False on a libjpeg error.
bool read_header(jpeg_reader& r, const uint8_t* data, size_t size, long max_memory) {
  if (setjmp(r.jump)) return false;
  jpeg_create_decompress(&r.cinfo);
  r.created = true;
  // Past this, libjpeg would need a backing store it does not have and fails cleanly: it bounds the
  // coefficient buffers of progressive files, which are allocated before any scan data is seen.
  r.cinfo.mem->max_memory_to_use = max_memory;
  r.cinfo.progress = &r.progress;
  jpeg_mem_src(&r.cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(&r.cinfo, JPEG_APP0 + 1, 0xffff);
  jpeg_read_header(&r.cinfo, TRUE);
  return true;
}

// Decodes every scanline into `out` (u8 [height, width, 3]); CMYK rows go through `scratch` (one row of
// 4 bytes per pixel) and are converted as Pillow's cmyk2rgb does.
bool read_pixels(jpeg_reader& r, uint8_t* out, uint8_t* scratch, bool cmyk) {
  if (setjmp(r.jump)) return false;
  jpeg_start_decompress(&r.cinfo);
  const size_t w = r.cinfo.output_width;
  while (r.cinfo.output_scanline < r.cinfo.output_height) {
    const size_t y = r.cinfo.output_scanline;
    JSAMPROW row = cmyk ? scratch : out + y * w * 3;
    if (jpeg_read_scanlines(&r.cinfo, &row, 1) != 1) {
      std::snprintf(r.message, sizeof r.message, "no scanline %zu", y);
      return false;
    }
    if (!cmyk) continue;
    // Pillow reads CMYK JPEGs as Adobe-inverted ("CMYK;I"), so the stored k byte is 255 - K and the stored
    // c byte is 255 - C; then R = (255 - K) - (C * (255 - K)) / 255 with its MULDIV255 rounding.
    for (size_t x = 0; x < w; ++x) {
      const uint8_t* p = scratch + 4 * x;
      const int nk = p[3];
      for (int c = 0; c < 3; ++c) {
        const int t = (255 - p[c]) * nk + 128;
        out[(y * w + x) * 3 + c] = static_cast<uint8_t>(std::clamp(nk - (((t >> 8) + t) >> 8), 0, 255));
      }
    }
  }
  // Reads up to the EOI marker, so a file cut anywhere (even in its last bytes) is refused.
  jpeg_finish_decompress(&r.cinfo);
  return true;
}

// The orientation tag (0x0112) of IFD0 in the first APP1 "Exif" segment, as Pillow reads it; 1 when absent.
int exif_orientation(j_decompress_ptr cinfo) {
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next) {
    if (m->marker != JPEG_APP0 + 1 || m->data_length < 6 || std::memcmp(m->data, "Exif\0\0", 6) != 0)
      continue;
    std::unique_ptr<ExifData, void (*)(ExifData*)> ed(exif_data_new(), exif_data_unref);
    if (!ed) return 1;
    // As read, without libexif "fixing" the data to the specification (adding or changing entries).
    exif_data_unset_option(ed.get(), EXIF_DATA_OPTION_FOLLOW_SPECIFICATION);
    exif_data_load_data(ed.get(), m->data, m->data_length);
    ExifEntry* e = exif_content_get_entry(ed->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
    if (!e || e->format != EXIF_FORMAT_SHORT || e->components < 1 || e->size < 2 || !e->data) return 1;
    return exif_get_short(e->data, exif_data_get_byte_order(ed.get()));
  }
  return 1;
}

}  // namespace

rgb_image decode_jpeg(std::span<const uint8_t> bytes, const decode_limits& limits, const std::string& what) {
  jpeg_reader r;
  r.cinfo.err = jpeg_std_error(&r.err);
  r.err.error_exit = on_error_exit;
  r.err.emit_message = on_message;
  r.err.output_message = on_output;
  r.cinfo.client_data = &r;  // jpeg_create_decompress keeps err and client_data
  r.progress.progress_monitor = on_progress;
  jpeg_owner owner{&r};
  auto libjpeg_failed = [&]() {
    if (r.truncated)
      fail(what, "truncated JPEG: the data ends after " + std::to_string(bytes.size()) + " bytes");
    if (r.err.msg_code == JERR_NO_BACKING_STORE) fail(what, "JPEG needs more decoder memory than allowed");
    fail(what, std::string("corrupt JPEG: ") + r.message);
  };

  // Progressive files keep 2 bytes per sample per component in coefficient buffers: 8 bytes per pixel
  // covers CMYK at full resolution.
  const int64_t max_memory = std::min<int64_t>(limits.max_pixels, int64_t{1} << 40) * 8 + (int64_t{64} << 20);
  if (!read_header(r, bytes.data(), bytes.size(), static_cast<long>(max_memory))) libjpeg_failed();
  check_dimensions(r.cinfo.image_width, r.cinfo.image_height, limits, what, "JPEG");
  bool cmyk = false;
  switch (r.cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
      r.cinfo.out_color_space = JCS_RGB;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      r.cinfo.out_color_space = JCS_CMYK;
      cmyk = true;
      break;
    default:
      fail(what, "JPEG with " + std::to_string(r.cinfo.num_components) +
                     " color components in an unknown color space is not supported");
  }
  const int orientation = exif_orientation(&r.cinfo);

  rgb_image img;
  img.width = r.cinfo.image_width;
  img.height = r.cinfo.image_height;
  img.rgb.resize(static_cast<size_t>(img.width * img.height * 3));
  std::vector<uint8_t> scratch(cmyk ? static_cast<size_t>(img.width) * 4 : 0);
  if (!read_pixels(r, img.rgb.data(), scratch.data(), cmyk)) libjpeg_failed();
  return apply_orientation(std::move(img), orientation);
}

}  // namespace moxi::image::detail
