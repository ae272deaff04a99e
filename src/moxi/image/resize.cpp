// resize_bicubic: Pillow's convolution resampler (src/libImaging/Resample.c, Pillow 9.4) for 8-bit RGB with
// its bicubic filter, reimplemented step for step so the output matches Image.resize(size, BICUBIC) bit for
// bit: the same double-precision coefficients, the same fixed-point rounding, the same pass order.
#include <algorithm>
#include <cmath>
#include <string>

#include "moxi/base/error.h"
#include "moxi/image/preprocess.h"

namespace moxi::image {
namespace {

// Coefficients are rounded to 22 fractional bits: 8 bits of pixel plus 2 bits of headroom for the sums of
// a kernel with negative lobes must fit an int32.
constexpr int kPrecisionBits = 32 - 8 - 2;

// Keys' cubic with a = -0.5, written exactly as Pillow evaluates it (the operation order decides the last
// bit of the coefficients).
double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// For each output position along one axis: the first input index, the number of taps and the fixed-point
// weights (ksize per position, the unused tail zero).
struct axis_coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};

axis_coeffs precompute(int in_size, int out_size) {
  // Pillow takes the box edges as floats; for a whole image they are 0 and in_size, both exact.
  const double scale = static_cast<double>(static_cast<float>(in_size) - 0.0f) / out_size;
  // Downscaling widens the kernel by the scale (antialiasing); upscaling keeps it at support 2.
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  axis_coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> k(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = 0.0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // Truncation toward zero of a value that may be negative, as Pillow's (int) cast; clamped right after.
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = bicubic((x + xmin - center + 0.5) * ss);
      k[x] = w;
      ww += w;
    }
    for (int x = 0; x < xmax; ++x) {
      if (ww != 0.0) k[x] /= ww;
      // Round half away from zero to 22 fractional bits.
      c.weights[static_cast<size_t>(xx) * c.ksize + x] =
          k[x] < 0 ? static_cast<int32_t>(-0.5 + k[x] * (1 << kPrecisionBits))
                   : static_cast<int32_t>(0.5 + k[x] * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

// The accumulator starts at one half (rounding), the result is its integer part clamped to 0..255.
inline uint8_t clip8(int32_t acc) {
  return static_cast<uint8_t>(std::clamp<int32_t>(acc >> kPrecisionBits, 0, 255));
}

// u8 [rows, out_w, 3] from rows row0.. of `in` (u8 [.., in_w, 3]).
void horizontal(const uint8_t* in, int64_t in_w, int64_t row0, int64_t rows, const axis_coeffs& c,
                int64_t out_w, uint8_t* out) {
  for (int64_t y = 0; y < rows; ++y) {
    const uint8_t* src = in + (row0 + y) * in_w * 3;
    uint8_t* dst = out + y * out_w * 3;
    for (int64_t xx = 0; xx < out_w; ++xx) {
      const int32_t* k = &c.weights[static_cast<size_t>(xx) * c.ksize];
      const uint8_t* p = src + static_cast<int64_t>(c.first[xx]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < c.count[xx]; ++x) {
        s0 += p[3 * x + 0] * k[x];
        s1 += p[3 * x + 1] * k[x];
        s2 += p[3 * x + 2] * k[x];
      }
      dst[3 * xx + 0] = clip8(s0);
      dst[3 * xx + 1] = clip8(s1);
      dst[3 * xx + 2] = clip8(s2);
    }
  }
}

// u8 [out_h, w, 3] from `in` (u8 [.., w, 3]) whose row 0 is input row `row0` of the coefficients.
void vertical(const uint8_t* in, int64_t w, int64_t row0, const axis_coeffs& c, int64_t out_h, uint8_t* out) {
  const int64_t stride = w * 3;
  // Row by row into int32 accumulators: the sums are exact integers, so the order of the terms is free.
  std::vector<int32_t> acc(static_cast<size_t>(stride));
  for (int64_t yy = 0; yy < out_h; ++yy) {
    const int32_t* k = &c.weights[static_cast<size_t>(yy) * c.ksize];
    const uint8_t* src = in + (c.first[yy] - row0) * stride;
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < c.count[yy]; ++y) {
      const uint8_t* row = src + y * stride;
      for (int64_t i = 0; i < stride; ++i) acc[i] += row[i] * k[y];
    }
    uint8_t* dst = out + yy * stride;
    for (int64_t i = 0; i < stride; ++i) dst[i] = clip8(acc[i]);
  }
}

}  // namespace

rgb_image resize_bicubic(const rgb_image& img, int64_t width, int64_t height) {
  constexpr int64_t kMaxSide = 1 << 24;  // Pillow's float box edges are exact up to here
  if (img.width <= 0 || img.height <= 0 || img.width > kMaxSide || img.height > kMaxSide ||
      img.rgb.size() != static_cast<size_t>(img.width * img.height * 3)) {
    throw error("resize_bicubic: invalid input image (" + std::to_string(img.width) + " x " +
                std::to_string(img.height) + " with " + std::to_string(img.rgb.size()) + " bytes)");
  }
  if (width <= 0 || height <= 0 || width > kMaxSide || height > kMaxSide) {
    throw error("resize_bicubic: invalid target size " + std::to_string(width) + " x " +
                std::to_string(height));
  }
  if (width == img.width && height == img.height) return img;
  const int in_w = static_cast<int>(img.width), in_h = static_cast<int>(img.height);
  const int out_w = static_cast<int>(width), out_h = static_cast<int>(height);
  // Vertical coefficients first: they say which input rows the horizontal pass must produce.
  const axis_coeffs vc = precompute(in_h, out_h);
  const int64_t row_first = vc.first.front();
  const int64_t row_last = vc.first.back() + vc.count.back();

  rgb_image out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<size_t>(width * height * 3));
  if (out_w == in_w) {  // a pass at scale 1 would be the identity; Pillow skips it too
    vertical(img.rgb.data(), in_w, 0, vc, out_h, out.rgb.data());
    return out;
  }
  const axis_coeffs hc = precompute(in_w, out_w);
  if (out_h == in_h) {
    horizontal(img.rgb.data(), in_w, 0, in_h, hc, out_w, out.rgb.data());
    return out;
  }
  // The intermediate is 8-bit (rounded and clipped), like Pillow's, and holds only the rows needed.
  std::vector<uint8_t> tmp(static_cast<size_t>((row_last - row_first) * out_w * 3));
  horizontal(img.rgb.data(), in_w, row_first, row_last - row_first, hc, out_w, tmp.data());
  vertical(tmp.data(), out_w, row_first, vc, out_h, out.rgb.data());
  return out;
}

}  // namespace moxi::image
