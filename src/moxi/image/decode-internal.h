// What the format decoders share inside moxi_image; not part of the layer's interface.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "moxi/image/image.h"

namespace moxi::image::detail {

// Throws moxi::error: `what` + ": " + message.
[[noreturn]] void fail(const std::string& what, const std::string& message);

// Refuses empty and over-limit dimensions; called from the header, before any pixel buffer exists.
void check_dimensions(int64_t width, int64_t height, const decode_limits& limits, const std::string& what,
                      const char* format);

// Both take bytes that start with their format's magic and the limits already checked on the byte count.
rgb_image decode_png(std::span<const uint8_t> bytes, const decode_limits& limits, const std::string& what);
rgb_image decode_jpeg(std::span<const uint8_t> bytes, const decode_limits& limits, const std::string& what);

// Applies an EXIF orientation (1-8; anything else leaves the image as it is) the way Pillow's
// ImageOps.exif_transpose does, so the result is upright.
rgb_image apply_orientation(rgb_image img, int orientation);

// out = round((a * c + (255 - a) * 255) / 255): straight alpha composited onto white, for n pixels of RGBA.
void composite_on_white(const uint8_t* rgba, uint8_t* rgb, int64_t n);

}  // namespace moxi::image::detail
