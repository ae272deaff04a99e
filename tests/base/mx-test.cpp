// MX codecs against references written here, never against the codec's own output: the spec's FP4 value
// table typed out, the OFP8 bit-field formulas and E8M0 evaluated in fp64, and a slow fp64 block encoder
// (spec scale formula, nearest-value scan of the element table with ties to the even code).
#include "moxi/base/mx.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

using moxi::mx::elem_format;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// OCP MX v1.0 E2M1 code points, in code order (docs/mx-formats.md "Formats").
constexpr double kFp4Spec[16] = {0.0,  0.5,  1.0,  1.5,  2.0,  3.0,  4.0,  6.0,
                                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};

// OFP8 E4M3: bias 7, subnormals at exponent 0, only S.1111.111 is NaN, no Inf.
double e4m3_formula(uint8_t b) {
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int e = (b >> 3) & 0xF;
  const int m = b & 0x7;
  if (e == 15 && m == 7) return kNaN;
  if (e == 0) return sign * std::ldexp(m / 8.0, -6);
  return sign * std::ldexp(1.0 + m / 8.0, e - 7);
}

// OFP8 E5M2: bias 15, IEEE-like: all-ones exponent is Inf (mantissa 0) or NaN.
double e5m2_formula(uint8_t b) {
  const double sign = (b & 0x80) ? -1.0 : 1.0;
  const int e = (b >> 2) & 0x1F;
  const int m = b & 0x3;
  if (e == 31) return m == 0 ? sign * kInf : kNaN;
  if (e == 0) return sign * std::ldexp(m / 4.0, -14);
  return sign * std::ldexp(1.0 + m / 4.0, e - 15);
}

struct ref_format {
  int emax;      // exponent of the largest power of two in the element format
  uint8_t sign;  // sign bit of a code
  uint8_t max_code;
  double max_value;
  std::vector<double> mags;  // value of positive codes 0..max_code, from the independent tables above
};

ref_format ref_of(elem_format f) {
  ref_format r;
  if (f == elem_format::FP4_E2M1) {
    r = {2, 0x8, 0x7, 6.0, {}};
    for (int c = 0; c <= 7; ++c) r.mags.push_back(kFp4Spec[c]);
  } else if (f == elem_format::FP8_E4M3) {
    r = {8, 0x80, 0x7E, 448.0, {}};
    for (int c = 0; c <= 0x7E; ++c) r.mags.push_back(e4m3_formula(uint8_t(c)));
  } else {
    r = {15, 0x80, 0x7B, 57344.0, {}};
    for (int c = 0; c <= 0x7B; ++c) r.mags.push_back(e5m2_formula(uint8_t(c)));
  }
  return r;
}

// Nearest representable element by a full scan; equal distances go to the even code; the scan saturates
// by itself because the largest finite value is the nearest to anything above it. Sign always kept.
uint8_t ref_encode(const ref_format& r, double v) {
  const double a = std::fabs(v);
  int best = 0;
  double best_d = kInf;
  for (int c = 0; c < int(r.mags.size()); ++c) {
    const double d = std::fabs(a - r.mags[c]);
    if (d < best_d || (d == best_d && c % 2 == 0)) {
      best = c;
      best_d = d;
    }
  }
  return uint8_t((std::signbit(v) ? r.sign : 0) | best);
}

// The spec's scale: floor(log2(amax)) - emax, found by comparing against powers of two in fp64.
uint8_t ref_scale(const ref_format& r, const float* x) {
  double amax = 0;
  for (int i = 0; i < 32; ++i) {
    if (!std::isfinite(x[i])) return 0xFF;
    amax = std::max(amax, std::fabs(double(x[i])));
  }
  if (amax == 0) return 0x00;
  int e = 0;
  while (std::ldexp(1.0, e) > amax) --e;
  while (std::ldexp(1.0, e + 1) <= amax) ++e;
  const int k = std::min(std::max(e - r.emax, -127), 127);
  return uint8_t(k + 127);
}

// Reference block encoder: element codes for one block (all 0 under a NaN scale, as documented).
std::vector<uint8_t> ref_block(const ref_format& r, const float* x, uint8_t scale) {
  std::vector<uint8_t> codes(32, 0);
  if (scale == 0xFF) return codes;
  for (int i = 0; i < 32; ++i) codes[i] = ref_encode(r, double(x[i]) / std::ldexp(1.0, int(scale) - 127));
  return codes;
}

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

uint8_t encode(elem_format f, float x) {
  switch (f) {
    case elem_format::FP4_E2M1:
      return moxi::mx::f32_to_fp4(x);
    case elem_format::FP8_E4M3:
      return moxi::mx::f32_to_fp8_e4m3(x);
    case elem_format::FP8_E5M2:
      return moxi::mx::f32_to_fp8_e5m2(x);
  }
  return 0;
}

// Quantize a row with the codec into per-element codes + scales, whatever the storage.
void codec_quantize(elem_format f, const std::vector<float>& x, std::vector<uint8_t>& codes,
                    std::vector<uint8_t>& scales, std::vector<float>& deq) {
  const size_t n = x.size();
  codes.assign(n, 0);
  scales.assign(n / 32, 0);
  deq.assign(n, 0);
  if (f == elem_format::FP4_E2M1) {
    std::vector<uint8_t> packed(n / 2);
    moxi::mx::quantize_mxfp4(x.data(), n, packed.data(), scales.data());
    for (size_t j = 0; j < n / 2; ++j) {
      codes[2 * j] = packed[j] & 0xF;
      codes[2 * j + 1] = packed[j] >> 4;
    }
    moxi::mx::dequantize_mxfp4(packed.data(), scales.data(), n, deq.data());
  } else {
    moxi::mx::quantize_mxfp8(f, x.data(), n, codes.data(), scales.data());
    moxi::mx::dequantize_mxfp8(f, codes.data(), scales.data(), n, deq.data());
  }
}

constexpr elem_format kAllFormats[] = {elem_format::FP4_E2M1, elem_format::FP8_E4M3, elem_format::FP8_E5M2};

// ---- decode tables ----

TEST(MxDecode, EveryFp4CodeMatchesSpecTable) {
  for (int c = 0; c < 16; ++c) {
    const float got = moxi::mx::fp4_to_f32(uint8_t(c));
    EXPECT_EQ(double(got), kFp4Spec[c]) << c;
    EXPECT_EQ(std::signbit(got), c >= 8) << c;  // 0x8 is -0.0
    EXPECT_TRUE(same_bits(moxi::mx::fp4_to_f32(uint8_t(0xF0 | c)), got)) << "high nibble ignored " << c;
  }
}

TEST(MxDecode, EveryE4m3ByteMatchesBitFieldFormula) {
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    const double want = e4m3_formula(uint8_t(b));
    const float got = moxi::mx::fp8_e4m3_to_f32(uint8_t(b));
    if (std::isnan(want)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << b;
      continue;
    }
    EXPECT_EQ(double(got), want) << b;
    EXPECT_EQ(std::signbit(got), b >= 0x80) << b;
    EXPECT_FALSE(std::isinf(got)) << b;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF only
  EXPECT_EQ(moxi::mx::fp8_e4m3_to_f32(0x7E), 448.0f);
  EXPECT_EQ(moxi::mx::fp8_e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(MxDecode, EveryE5m2ByteMatchesBitFieldFormula) {
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    const double want = e5m2_formula(uint8_t(b));
    const float got = moxi::mx::fp8_e5m2_to_f32(uint8_t(b));
    if (std::isnan(want)) {
      ++nans;
      EXPECT_TRUE(std::isnan(got)) << b;
      continue;
    }
    EXPECT_EQ(double(got), want) << b;
    EXPECT_EQ(std::signbit(got), b >= 0x80) << b;
  }
  EXPECT_EQ(nans, 6);
  EXPECT_EQ(moxi::mx::fp8_e5m2_to_f32(0x7C), INFINITY);
  EXPECT_EQ(moxi::mx::fp8_e5m2_to_f32(0xFC), -INFINITY);
  EXPECT_EQ(moxi::mx::fp8_e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(moxi::mx::fp8_e5m2_to_f32(0x01), std::ldexp(1.0f, -16));
}

TEST(MxDecode, EveryE8m0Byte) {
  for (int s = 0; s < 255; ++s) {
    const float got = moxi::mx::e8m0_to_f32(uint8_t(s));
    EXPECT_EQ(double(got), std::ldexp(1.0, s - 127)) << s;
    EXPECT_EQ(got, moxi::mx::kE8m0[s]) << s;
  }
  EXPECT_TRUE(std::isnan(moxi::mx::e8m0_to_f32(0xFF)));
  // 0x00 is 2^-127, an fp32 subnormal, never zero.
  EXPECT_EQ(std::bit_cast<uint32_t>(moxi::mx::e8m0_to_f32(0x00)), 0x00400000u);
  EXPECT_EQ(moxi::mx::e8m0_to_f32(0x7F), 1.0f);
  EXPECT_EQ(moxi::mx::e8m0_to_f32(0xFE), std::ldexp(1.0f, 127));
}

TEST(MxDecode, ElemToF32DispatchesPerFormat) {
  for (int b = 0; b < 256; ++b) {
    EXPECT_TRUE(
        same_bits(moxi::mx::elem_to_f32(elem_format::FP4_E2M1, uint8_t(b)), float(kFp4Spec[b & 0xF])));
    const double e4 = e4m3_formula(uint8_t(b)), e5 = e5m2_formula(uint8_t(b));
    if (!std::isnan(e4)) {
      EXPECT_EQ(double(moxi::mx::elem_to_f32(elem_format::FP8_E4M3, uint8_t(b))), e4);
    }
    if (!std::isnan(e5)) {
      EXPECT_EQ(double(moxi::mx::elem_to_f32(elem_format::FP8_E5M2, uint8_t(b))), e5);
    }
  }
}

// ---- scalar element encoding ----

TEST(MxEncode, EveryRepresentableValueRoundTrips) {
  for (int c = 0; c < 16; ++c) EXPECT_EQ(moxi::mx::f32_to_fp4(float(kFp4Spec[c])), c) << c;
  for (int b = 0; b < 256; ++b) {
    const double v4 = e4m3_formula(uint8_t(b));
    if (!std::isnan(v4)) {
      EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(float(v4)), b) << b;
    }
    const double v5 = e5m2_formula(uint8_t(b));
    if (std::isfinite(v5)) {
      EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(float(v5)), b) << b;
    }
  }
}

TEST(MxEncode, Fp4TiesToEvenAtEveryMidpoint) {
  struct tie {
    float x;
    uint8_t code;
  };
  // Midpoint -> the neighbour with the even code: 0.25 between 0 (0x0) and 0.5 (0x1) -> 0 and so on.
  const tie ties[] = {{0.25f, 0x0}, {0.75f, 0x2}, {1.25f, 0x2}, {1.75f, 0x4},
                      {2.5f, 0x4},  {3.5f, 0x6},  {5.0f, 0x6}};
  for (const tie& t : ties) {
    EXPECT_EQ(moxi::mx::f32_to_fp4(t.x), t.code) << t.x;
    EXPECT_EQ(moxi::mx::f32_to_fp4(-t.x), t.code | 0x8) << -t.x;
  }
}

// Every adjacent pair of finite values, taken from the independent tables: the midpoint goes to the even
// code, one ulp either side goes to the nearer neighbour; mirrored for negatives.
TEST(MxEncode, AllFormatsMidpointsAndNeighbours) {
  for (elem_format f : kAllFormats) {
    const ref_format r = ref_of(f);
    for (size_t c = 0; c + 1 < r.mags.size(); ++c) {
      const float lo = float(r.mags[c]), hi = float(r.mags[c + 1]);
      const float mid = float((r.mags[c] + r.mags[c + 1]) / 2);
      ASSERT_EQ(double(mid), (r.mags[c] + r.mags[c + 1]) / 2);  // midpoints are exact in fp32
      const uint8_t even = uint8_t(c % 2 == 0 ? c : c + 1);
      EXPECT_EQ(encode(f, mid), even) << int(f) << " " << mid;
      EXPECT_EQ(encode(f, -mid), even | r.sign) << int(f) << " " << -mid;
      EXPECT_EQ(encode(f, std::nextafter(mid, 0.0f)), c) << int(f) << " " << mid;
      EXPECT_EQ(encode(f, std::nextafter(mid, INFINITY)), c + 1) << int(f) << " " << mid;
      EXPECT_EQ(encode(f, -std::nextafter(mid, INFINITY)), (c + 1) | r.sign) << int(f) << " " << mid;
      EXPECT_EQ(encode(f, lo), c);
      EXPECT_EQ(encode(f, hi), c + 1);
    }
  }
}

TEST(MxEncode, SaturatesToMaxFiniteWithSign) {
  for (float x : {6.0f, 6.5f, 7.0f, 8.0f, 1e30f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(moxi::mx::f32_to_fp4(x), 0x7) << x;
    EXPECT_EQ(moxi::mx::f32_to_fp4(-x), 0xF) << x;
  }
  for (float x : {448.0f, 449.0f, 464.0f, 480.0f, 1e6f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(x), 0x7E) << x;
    EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(-x), 0xFE) << x;
  }
  for (float x : {57344.0f, 61440.0f, 65536.0f, 1e10f, FLT_MAX, INFINITY}) {
    EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(x), 0x7B) << x;
    EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(-x), 0xFB) << x;
  }
}

TEST(MxEncode, NaNZerosAndUnderflow) {
  EXPECT_EQ(moxi::mx::f32_to_fp4(NAN), 0x0);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(NAN), 0x7F);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(NAN), 0x7E);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(-NAN), 0x7F);
  // Signed zeros and values that round to zero keep their sign.
  EXPECT_EQ(moxi::mx::f32_to_fp4(0.0f), 0x0);
  EXPECT_EQ(moxi::mx::f32_to_fp4(-0.0f), 0x8);
  EXPECT_EQ(moxi::mx::f32_to_fp4(-0.1f), 0x8);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(-0.0f), 0x80);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(-0.0f), 0x80);
  // Half the smallest subnormal ties to zero (even); a bit more rounds up to it.
  EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(1.5f * std::ldexp(1.0f, -10)), 0x01);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e4m3(-std::ldexp(1.0f, -11)), 0x80);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(std::ldexp(1.0f, -17)), 0x00);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(std::ldexp(3.0f, -17)), 0x02);  // 1.5 steps: tie to even code 2
  // fp32 subnormal inputs underflow to signed zero.
  EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(moxi::mx::f32_to_fp8_e5m2(-std::numeric_limits<float>::denorm_min()), 0x80);
}

// ---- scale rule ----

struct scale_case {
  elem_format f;
  float amax;
  uint8_t scale;
  float deq;  // the amax element after the round trip
};

TEST(MxScale, FloorRuleWorkedExamples) {
  const float below4 = std::nextafter(4.0f, 0.0f);
  const scale_case cases[] = {
      // docs/mx-formats.md "Encoding a block": 3.0001 -> X = 0.5, 6.0002 clamps to 6 -> 3.0; 7.0 -> X = 1,
      // clamps to 6; 1.6 -> X = 0.25, 6.4 clamps to 6 -> 1.5.
      {elem_format::FP4_E2M1, 3.0001f, 126, 3.0f},
      {elem_format::FP4_E2M1, 7.0f, 127, 6.0f},
      {elem_format::FP4_E2M1, 1.6f, 125, 1.5f},
      {elem_format::FP4_E2M1, -7.0f, 127, -6.0f},
      {elem_format::FP4_E2M1, 6.0f, 127, 6.0f},
      {elem_format::FP4_E2M1, 4.0f, 127, 4.0f},
      // Just below a power of two: floor(log2) is 1, not 2 (a float log2 could round up to 2.0 here).
      {elem_format::FP4_E2M1, below4, 126, 3.0f},
      {elem_format::FP4_E2M1, FLT_MAX, 252, 1.5f * std::ldexp(1.0f, 127)},
      // fp32 subnormal amax: exponent clamps to -127 (byte 0x00); 2^-130 / 2^-127 = 0.125 -> FP4 0.
      {elem_format::FP4_E2M1, std::ldexp(1.0f, -130), 0x00, 0.0f},
      {elem_format::FP8_E4M3, std::ldexp(1.0f, -130), 0x00, std::ldexp(1.0f, -130)},
      {elem_format::FP8_E4M3, 1.0f, 119, 1.0f},
      {elem_format::FP8_E4M3, 448.0f, 127, 448.0f},
      {elem_format::FP8_E4M3, 500.0f, 127, 448.0f},
      {elem_format::FP8_E4M3, 511.0f, 127, 448.0f},
      {elem_format::FP8_E4M3, 512.0f, 128, 512.0f},
      {elem_format::FP8_E5M2, 1.0f, 112, 1.0f},
      {elem_format::FP8_E5M2, 57344.0f, 127, 57344.0f},
      {elem_format::FP8_E5M2, 65535.0f, 127, 57344.0f},
  };
  for (const scale_case& c : cases) {
    std::vector<float> x(32, 0.0f);
    x[3] = c.amax;
    x[7] = c.amax / 64;
    std::vector<uint8_t> codes, scales;
    std::vector<float> deq;
    codec_quantize(c.f, x, codes, scales, deq);
    EXPECT_EQ(scales[0], c.scale) << int(c.f) << " " << c.amax;
    EXPECT_EQ(moxi::mx::block_scale(c.f, x.data()), c.scale) << int(c.f) << " " << c.amax;
    EXPECT_EQ(deq[3], c.deq) << int(c.f) << " " << c.amax;
  }
}

// ---- random blocks vs the fp64 reference encoder ----

// Builds a row of `blocks` blocks with a mix of magnitudes (fp32 subnormal to near FLT_MAX), integer
// grids that land on element midpoints, signed zeros, lone outliers and occasional NaN/Inf.
std::vector<float> random_row(std::mt19937& rng, int blocks, bool allow_nonfinite) {
  std::vector<float> x(size_t(blocks) * 32);
  std::normal_distribution<double> gauss(0.0, 1.0);
  std::uniform_int_distribution<int> mode_d(0, 5), base_d(-150, 124), u100(0, 99);
  for (int b = 0; b < blocks; ++b) {
    float* xb = x.data() + b * 32;
    const int mode = mode_d(rng);
    const int base = base_d(rng);
    if (mode <= 1) {  // gaussian at a random binade
      for (int i = 0; i < 32; ++i) xb[i] = float(std::ldexp(gauss(rng), base));
    } else if (mode <= 3) {  // small integers times a power of two: many exact grid points and ties
      const int width = std::uniform_int_distribution<int>(1, 12)(rng);
      std::uniform_int_distribution<int> v(-(1 << width), 1 << width);
      const int b2 = std::min(std::max(base, -140), 110);  // stay finite: |v| <= 2^12
      for (int i = 0; i < 32; ++i) xb[i] = float(std::ldexp(double(v(rng)), b2));
    } else if (mode == 4) {  // one outlier over small values
      for (int i = 0; i < 32; ++i) xb[i] = float(std::ldexp(gauss(rng), base - 10));
      xb[std::uniform_int_distribution<int>(0, 31)(rng)] = float(std::ldexp(1.0 + u100(rng) / 100.0, base));
    } else {  // signed zeros mixed with a few values
      for (int i = 0; i < 32; ++i) xb[i] = u100(rng) < 50 ? -0.0f : 0.0f;
      if (u100(rng) < 70) xb[3] = float(std::ldexp(gauss(rng), base));
    }
    if (allow_nonfinite && u100(rng) < 5) {
      const float bad[] = {NAN, INFINITY, -INFINITY};
      xb[std::uniform_int_distribution<int>(0, 31)(rng)] = bad[std::uniform_int_distribution<int>(0, 2)(rng)];
    }
  }
  return x;
}

TEST(MxRandom, CodesAndScalesBitIdenticalToFp64Reference) {
  int blocks_checked = 0;
  for (elem_format f : kAllFormats) {
    const ref_format r = ref_of(f);
    for (uint32_t seed = 0; seed < 300; ++seed) {
      std::mt19937 rng(seed * 3 + uint32_t(f));
      const std::vector<float> x = random_row(rng, 8, true);
      std::vector<uint8_t> codes, scales;
      std::vector<float> deq;
      codec_quantize(f, x, codes, scales, deq);
      for (int b = 0; b < 8; ++b) {
        const float* xb = x.data() + b * 32;
        const uint8_t want_scale = ref_scale(r, xb);
        ASSERT_EQ(scales[b], want_scale) << "format " << int(f) << " seed " << seed << " block " << b;
        const std::vector<uint8_t> want = ref_block(r, xb, want_scale);
        for (int i = 0; i < 32; ++i) {
          ASSERT_EQ(codes[b * 32 + i], want[i])
              << "format " << int(f) << " seed " << seed << " block " << b << " x " << xb[i];
        }
        ++blocks_checked;
      }
    }
  }
  EXPECT_EQ(blocks_checked, 3 * 300 * 8);
}

TEST(MxRandom, RoundTripErrorWithinHalfStepOrClamp) {
  for (elem_format f : kAllFormats) {
    const ref_format r = ref_of(f);
    // Smallest normal exponent and mantissa bits, from the format definitions (not the codec).
    const int emin = f == elem_format::FP4_E2M1 ? 0 : f == elem_format::FP8_E4M3 ? -6 : -14;
    const int mbits = f == elem_format::FP4_E2M1 ? 1 : f == elem_format::FP8_E4M3 ? 3 : 2;
    for (uint32_t seed = 0; seed < 200; ++seed) {
      std::mt19937 rng(1000 + seed);
      const std::vector<float> x = random_row(rng, 8, false);
      std::vector<uint8_t> codes, scales;
      std::vector<float> deq;
      codec_quantize(f, x, codes, scales, deq);
      for (size_t i = 0; i < x.size(); ++i) {
        const double scale = std::ldexp(1.0, int(scales[i / 32]) - 127);
        const double v = double(x[i]) / scale, q = double(deq[i]) / scale;
        ASSERT_EQ(std::signbit(v), std::signbit(q)) << x[i];
        if (std::fabs(v) >= r.max_value) {
          ASSERT_EQ(std::fabs(q), r.max_value) << x[i];  // clamp error only
          continue;
        }
        const int e = v == 0 ? emin : std::max(std::ilogb(v), emin);
        const double half_step = std::ldexp(0.5, e - mbits);
        ASSERT_LE(std::fabs(v - q), half_step) << "format " << int(f) << " x " << x[i];
      }
    }
  }
}

// ---- storage, special blocks, fake quant ----

TEST(MxStorage, Fp4EvenElementInLowNibble) {
  std::vector<float> x(64);
  std::vector<uint8_t> want_codes(64);
  for (int i = 0; i < 64; ++i) {
    want_codes[i] = uint8_t((i * 7 + 3) % 16);  // all 16 codes per block, so amax = 6 and the scale is 1
    x[i] = float(kFp4Spec[want_codes[i]]);
  }
  std::vector<uint8_t> blocks(32), scales(2);
  moxi::mx::quantize_mxfp4(x.data(), 64, blocks.data(), scales.data());
  EXPECT_EQ(scales[0], 0x7F);
  EXPECT_EQ(scales[1], 0x7F);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(blocks[j], want_codes[2 * j] | (want_codes[2 * j + 1] << 4)) << j;
  std::vector<float> out(64);
  moxi::mx::dequantize_mxfp4(blocks.data(), scales.data(), 64, out.data());
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(same_bits(out[i], x[i])) << i;
}

TEST(MxStorage, ZeroBlocksGetScaleZeroAndKeepSigns) {
  for (elem_format f : kAllFormats) {
    std::vector<float> x(64, 0.0f);
    for (int i = 32; i < 64; ++i) x[i] = -0.0f;
    std::vector<uint8_t> codes, scales;
    std::vector<float> deq;
    codec_quantize(f, x, codes, scales, deq);
    const uint8_t neg_zero = f == elem_format::FP4_E2M1 ? 0x8 : 0x80;
    EXPECT_EQ(scales[0], 0x00);
    EXPECT_EQ(scales[1], 0x00);
    for (int i = 0; i < 64; ++i) {
      EXPECT_EQ(codes[i], i < 32 ? 0 : neg_zero) << i;
      EXPECT_EQ(deq[i], 0.0f);
      EXPECT_EQ(std::signbit(deq[i]), i >= 32) << i;
    }
  }
}

TEST(MxStorage, NaNOrInfPoisonsOnlyItsBlock) {
  for (elem_format f : kAllFormats) {
    for (float bad : {NAN, INFINITY, -INFINITY}) {
      std::vector<float> x(96);
      for (int i = 0; i < 96; ++i) x[i] = 0.1f * float(i - 40);
      x[32 + 5] = bad;
      std::vector<uint8_t> codes, scales;
      std::vector<float> deq;
      codec_quantize(f, x, codes, scales, deq);
      EXPECT_EQ(scales[1], 0xFF);
      EXPECT_NE(scales[0], 0xFF);
      EXPECT_NE(scales[2], 0xFF);
      for (int i = 32; i < 64; ++i) {
        EXPECT_EQ(codes[i], 0) << i;
        EXPECT_TRUE(std::isnan(deq[i])) << i;
      }
      // The neighbouring blocks are exactly what they are when quantized alone.
      std::vector<float> alone(x.begin(), x.begin() + 32);
      alone.insert(alone.end(), x.begin() + 64, x.end());
      std::vector<uint8_t> codes2, scales2;
      std::vector<float> deq2;
      codec_quantize(f, alone, codes2, scales2, deq2);
      for (int i = 0; i < 32; ++i) {
        EXPECT_EQ(codes[i], codes2[i]);
        EXPECT_EQ(codes[64 + i], codes2[32 + i]);
        EXPECT_FALSE(std::isnan(deq[i]));
      }
    }
  }
}

TEST(MxStorage, DecodeOfScaleBytes00AndFF) {
  // Hand-built storage: scale 0x00 multiplies by 2^-127 exactly; 0xFF makes the block NaN even for
  // zero elements.
  std::vector<uint8_t> blocks(32, 0x71), scales = {0x00, 0xFF};  // elements 0.5 (even), 6 (odd)
  std::vector<float> out(64);
  moxi::mx::dequantize_mxfp4(blocks.data(), scales.data(), 64, out.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(double(out[i]), (i % 2 ? 6.0 : 0.5) * std::ldexp(1.0, -127)) << i;
  for (int i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
  std::vector<uint8_t> e(64, 0x00);
  e[1] = 0x7E;
  moxi::mx::dequantize_mxfp8(elem_format::FP8_E4M3, e.data(), scales.data(), 64, out.data());
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(double(out[1]), 448.0 * std::ldexp(1.0, -127));
  for (int i = 32; i < 64; ++i) EXPECT_TRUE(std::isnan(out[i])) << i;
}

TEST(MxFakeQuant, BitIdenticalToDequantizeOfQuantize) {
  for (elem_format f : kAllFormats) {
    for (uint32_t seed = 0; seed < 100; ++seed) {
      std::mt19937 rng(5000 + seed);
      const std::vector<float> x = random_row(rng, 8, true);
      std::vector<uint8_t> codes, scales;
      std::vector<float> deq;
      codec_quantize(f, x, codes, scales, deq);
      std::vector<float> fq(x.size());
      moxi::mx::fake_quantize(f, x.data(), x.size(), fq.data());
      ASSERT_EQ(std::memcmp(fq.data(), deq.data(), x.size() * sizeof(float)), 0) << int(f) << " " << seed;
      std::vector<float> in_place = x;  // out aliasing x is allowed
      moxi::mx::fake_quantize(f, in_place.data(), in_place.size(), in_place.data());
      ASSERT_EQ(std::memcmp(in_place.data(), deq.data(), x.size() * sizeof(float)), 0)
          << int(f) << " " << seed;
    }
  }
}

// ---- E4M3 rows with one power-of-two scale (the DSA index keys) ----

// The documented rule in fp64: the smallest power of two 2^e with max(amax, 1e-4) <= 448 * 2^e.
double ref_row_scale(const float* x, size_t n) {
  double amax = 1e-4;
  for (size_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(double(x[i])));
  int e = -200;
  while (amax > 448.0 * std::ldexp(1.0, e)) ++e;
  return std::ldexp(1.0, e);
}

TEST(Fp8Row, ScaleIsSmallestPowerOfTwoAndCodesAreNearest) {
  const ref_format r = ref_of(elem_format::FP8_E4M3);
  int rows = 0;
  for (uint32_t seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(7000 + seed);
    const std::vector<float> x = random_row(rng, 4, false);
    for (size_t n : {size_t(1), size_t(20), size_t(64), size_t(128)}) {
      std::vector<uint8_t> codes(n, 0xAA);
      const float scale = moxi::mx::quantize_fp8_row(x.data(), n, codes.data());
      const double want = ref_row_scale(x.data(), n);
      ASSERT_EQ(double(scale), want) << "seed " << seed << " n " << n;
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(codes[i], ref_encode(r, double(x[i]) / want)) << "seed " << seed << " x " << x[i];
        ASSERT_LE(std::fabs(double(x[i]) / want), 448.0);  // the scale leaves nothing to saturate
      }
      std::vector<float> fq(n);
      moxi::mx::fake_quantize_fp8_row(x.data(), n, fq.data());
      for (size_t i = 0; i < n; ++i)
        ASSERT_TRUE(same_bits(fq[i], float(e4m3_formula(codes[i]) * want))) << "seed " << seed << " i " << i;
      ++rows;
    }
  }
  EXPECT_EQ(rows, 1600);
}

TEST(Fp8Row, WorkedScalesZerosAndNonFinite) {
  auto scale_of = [](std::vector<float> x) {
    std::vector<uint8_t> codes(x.size());
    return moxi::mx::quantize_fp8_row(x.data(), x.size(), codes.data());
  };
  EXPECT_EQ(scale_of({448.0f}), 1.0f);                       // exactly at the top of the grid
  EXPECT_EQ(scale_of({449.0f}), 2.0f);                       // just past it
  EXPECT_EQ(scale_of({-1.0f, 0.5f}), 0.00390625f);           // 448 * 2^-8 = 1.75 >= 1 > 448 * 2^-9
  EXPECT_EQ(scale_of({0.0f, 0.0f}), std::ldexp(1.0f, -22));  // the 1e-4 floor: 448 * 2^-22 >= 1e-4
  std::vector<float> z = {-0.0f, 0.0f};
  std::vector<uint8_t> zc(2);
  moxi::mx::quantize_fp8_row(z.data(), 2, zc.data());
  EXPECT_EQ(zc[0], 0x80);
  EXPECT_EQ(zc[1], 0x00);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = {1.0f, bad, -2.0f};
    std::vector<uint8_t> c(3, 0xAA);
    EXPECT_TRUE(std::isnan(moxi::mx::quantize_fp8_row(x.data(), 3, c.data())));
    EXPECT_EQ(c, std::vector<uint8_t>(3, 0));
    std::vector<float> fq(3);
    moxi::mx::fake_quantize_fp8_row(x.data(), 3, fq.data());
    for (float v : fq) EXPECT_TRUE(std::isnan(v));
  }
}

TEST(MxDeathTest, RowNotMultipleOfBlockAsserts) {
  std::vector<float> x(33, 1.0f), out(33);
  std::vector<uint8_t> b(17), s(2);
  EXPECT_DEATH(moxi::mx::quantize_mxfp4(x.data(), 33, b.data(), s.data()), "multiple of the 32");
  EXPECT_DEATH(moxi::mx::fake_quantize(elem_format::FP8_E4M3, x.data(), 33, out.data()),
               "multiple of the 32");
}

}  // namespace
