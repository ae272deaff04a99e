// MX block encoders: exact FLOOR-rule scale selection from the float's exponent bits and RNE element
// rounding done in fp32 where every step is exact (see mx.h for the rules and special cases).
#include "moxi/base/mx.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "moxi/base/error.h"

namespace moxi::mx {
namespace {

// What the element rounding needs to know about a format: mantissa bits, the exponent of its smallest
// normal binade (below it the grid is the subnormal one), and the code of its largest finite value.
struct elem_spec {
  int mbits;
  int emin;
  uint8_t max_code;
  float max_value;
};

constexpr elem_spec kSpecFp4{1, 0, 0x7, 6.0f};
constexpr elem_spec kSpecE4m3{3, -6, 0x7E, 448.0f};
constexpr elem_spec kSpecE5m2{2, -14, 0x7B, 57344.0f};

constexpr const elem_spec& spec_of(elem_format f) {
  return f == elem_format::FP4_E2M1 ? kSpecFp4 : f == elem_format::FP8_E4M3 ? kSpecE4m3 : kSpecE5m2;
}

// floor(log2(a)) for a finite a > 0, read from the bits: exact, unlike a floating log2 near powers of two.
int floor_log2(float a) {
  const uint32_t u = std::bit_cast<uint32_t>(a);
  const int biased = int(u >> 23);
  if (biased != 0) return biased - 127;
  return (31 - std::countl_zero(u)) - 149;  // subnormal: u * 2^-149
}

// Magnitude code of a finite a >= 0 on the element grid: RNE, saturating at the largest finite value.
// Every float operation here is exact: a is scaled by a power of two into [0, 2^(mbits+1)) without
// leaving the normal range (scaling up is always exact; scaling down only happens for a >= 2^emin).
uint8_t encode_magnitude(const elem_spec& s, float a) {
  if (!(a < s.max_value)) return s.max_code;  // also +Inf (SAT mode)
  const int e = a == 0.0f ? s.emin : std::max(floor_log2(a), s.emin);
  const float n = a * detail::pow2(s.mbits - e);  // a in units of the grid step 2^(e - mbits)
  uint32_t q = uint32_t(n);
  const float frac = n - float(q);
  if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
  // Codes are monotone in value, so a carry out of the mantissa correctly bumps the exponent field.
  return uint8_t((uint32_t(e - s.emin) << s.mbits) + q);
}

// Scale exponent 2^k as the fp32 value that divides by it: k ranges over [-127, 125] (see block_scale),
// so 2^-k is a normal float in [2^-125, 2^127].
float inverse_scale(uint8_t scale_byte) {
  return detail::pow2(127 - int(scale_byte));
}

void check_row(size_t n) {
  MOXI_ASSERT(n % kBlock == 0, "MX rows must be a multiple of the 32-element block");
}

}  // namespace

uint8_t f32_to_fp4(float x) {
  if (std::isnan(x)) return 0x0;
  return uint8_t((std::signbit(x) ? 0x8 : 0x0) | encode_magnitude(kSpecFp4, std::fabs(x)));
}

uint8_t f32_to_fp8_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  return uint8_t((std::signbit(x) ? 0x80 : 0x00) | encode_magnitude(kSpecE4m3, std::fabs(x)));
}

uint8_t f32_to_fp8_e5m2(float x) {
  if (std::isnan(x)) return 0x7E;
  return uint8_t((std::signbit(x) ? 0x80 : 0x00) | encode_magnitude(kSpecE5m2, std::fabs(x)));
}

uint8_t f32_to_elem(elem_format f, float x) {
  if (f == elem_format::FP4_E2M1) return f32_to_fp4(x);
  return f == elem_format::FP8_E4M3 ? f32_to_fp8_e4m3(x) : f32_to_fp8_e5m2(x);
}

uint8_t block_scale(elem_format f, const float* x) {
  // |x| as bits orders like the magnitude, and every NaN/Inf pattern is >= 0x7f800000.
  uint32_t amax_bits = 0;
  for (int i = 0; i < kBlock; ++i)
    amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  if (amax_bits >= 0x7f800000u) return 0xFF;  // NaN or Inf anywhere: the whole block is NaN
  if (amax_bits == 0) return 0x00;            // all zero: microxcaling's FP32_MIN_NORMAL rule clamps to 0x00
  const int k = std::clamp(floor_log2(std::bit_cast<float>(amax_bits)) - elem_emax(f), -127, 127);
  return uint8_t(k + 127);
}

namespace {

// Encodes one block's elements given its scale; element bytes under a NaN scale are written as 0.
template <typename Store>
void encode_block(elem_format f, const float* x, uint8_t scale_byte, Store store) {
  if (scale_byte == 0xFF) {
    for (int i = 0; i < kBlock; ++i) store(i, uint8_t(0));
    return;
  }
  // x * 2^-k is exact except when the product is an fp32 subnormal (below 2^-126), and those round to
  // (signed) zero in every element format either way, so there is no double rounding.
  const float inv = inverse_scale(scale_byte);
  for (int i = 0; i < kBlock; ++i) store(i, f32_to_elem(f, x[i] * inv));
}

}  // namespace

void quantize_mxfp4(const float* x, size_t n, uint8_t* blocks, uint8_t* scales) {
  check_row(n);
  for (size_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    uint8_t* out = blocks + b * (kBlock / 2);
    const uint8_t s = block_scale(elem_format::FP4_E2M1, xb);
    scales[b] = s;
    encode_block(elem_format::FP4_E2M1, xb, s, [out](int i, uint8_t code) {
      // gpt-oss layout: even element in the low nibble.
      if (i % 2 == 0) {
        out[i / 2] = code;
      } else {
        out[i / 2] = uint8_t(out[i / 2] | (code << 4));
      }
    });
  }
}

void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, size_t n, float* out) {
  check_row(n);
  for (size_t j = 0; j < n / 2; ++j) {
    const float s = kE8m0[scales[j / (kBlock / 2)]];
    out[2 * j] = kFp4[blocks[j] & 0xF] * s;
    out[2 * j + 1] = kFp4[blocks[j] >> 4] * s;
  }
}

void quantize_mxfp8(elem_format f, const float* x, size_t n, uint8_t* elems, uint8_t* scales) {
  MOXI_ASSERT(f != elem_format::FP4_E2M1, "MXFP8 needs an FP8 element format");
  check_row(n);
  for (size_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    uint8_t* out = elems + b * kBlock;
    const uint8_t s = block_scale(f, xb);
    scales[b] = s;
    encode_block(f, xb, s, [out](int i, uint8_t code) { out[i] = code; });
  }
}

void dequantize_mxfp8(elem_format f, const uint8_t* elems, const uint8_t* scales, size_t n, float* out) {
  MOXI_ASSERT(f != elem_format::FP4_E2M1, "MXFP8 needs an FP8 element format");
  check_row(n);
  const std::array<float, 256>& table = f == elem_format::FP8_E4M3 ? kFp8E4m3 : kFp8E5m2;
  for (size_t i = 0; i < n; ++i) out[i] = table[elems[i]] * kE8m0[scales[i / kBlock]];
}

void fake_quantize(elem_format f, const float* x, size_t n, float* out) {
  check_row(n);
  for (size_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float* ob = out + b * kBlock;
    const uint8_t s = block_scale(f, xb);  // reads the whole block before any write, so out may alias x
    const float scale = kE8m0[s];
    // The same product the dequantizers compute, so the result is bit-identical to them.
    encode_block(f, xb, s, [f, ob, scale](int i, uint8_t code) { ob[i] = elem_to_f32(f, code) * scale; });
  }
}

float quantize_fp8_row(const float* x, size_t n, uint8_t* codes) {
  MOXI_ASSERT(n >= 1);
  uint32_t amax_bits = 0;
  for (size_t i = 0; i < n; ++i) amax_bits = std::max(amax_bits, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  if (amax_bits >= 0x7f800000u) {  // NaN or Inf
    std::fill(codes, codes + n, uint8_t(0));
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float amax = std::max(std::bit_cast<float>(amax_bits), 1e-4f);
  // amax / 2^e0 is in [256, 512): e0 + 1 is needed exactly when it exceeds 448 (and e0 - 1 never suffices).
  int e = floor_log2(amax) - elem_emax(elem_format::FP8_E4M3);
  if (amax > 448.0f * detail::pow2(e)) ++e;
  // x / 2^e as x * 2^-e: exact unless the product is below 2^-126, and those round to zero in E4M3 anyway.
  const float inv = detail::pow2(-e);
  for (size_t i = 0; i < n; ++i) codes[i] = f32_to_fp8_e4m3(x[i] * inv);
  return detail::pow2(e);
}

void fake_quantize_fp8_row(const float* x, size_t n, float* out) {
  thread_local std::vector<uint8_t> codes;
  codes.resize(n);
  const float scale = quantize_fp8_row(x, n, codes.data());
  for (size_t i = 0; i < n; ++i) out[i] = kFp8E4m3[codes[i]] * scale;
}

}  // namespace moxi::mx
