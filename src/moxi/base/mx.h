// OCP Microscaling (MX v1.0) codecs: MXFP4 (E2M1) and MXFP8 (E4M3, E5M2) elements in blocks of 32 that
// share one E8M0 power-of-two scale, with OCP's FLOOR scale rule (docs/model-spec.md §4, docs/mx-formats.md).
//
// Encoding, per block of 32 values x[i]:
//   - amax = max |x[i]|.
//   - Any NaN or Inf in the block: scale byte 0xFF (NaN) and every element byte 0; the whole block decodes
//     to NaN (microxcaling's behaviour; the spec leaves element bits under a NaN scale unspecified).
//   - Otherwise scale_exp = floor(log2(amax)) - emax_elem (emax 2 for FP4, 8 for E4M3, 15 for E5M2),
//     floor(log2) taken exactly from the float's bits, clamped to [-127, 127]. amax == 0 (an all-zero
//     block) takes scale_exp = -127, i.e. scale byte 0x00, which is what microxcaling's substitution of
//     FP32_MIN_NORMAL for a zero amax gives. fp32 subnormal inputs are used as they are (no flush); a block
//     whose amax is below 2^(emax_elem-127) also gets byte 0x00 and its elements land on the element's
//     (possibly subnormal) grid at scale 2^-127. The upper clamp can never bind for finite floats.
//   - Element i = x[i] / 2^scale_exp rounded to nearest, ties to even, saturated to +-max (6, 448, 57344).
//     The sign is always kept, so -0.0 and negatives that round to zero encode as -0 (FP4 0x8, FP8 0x80).
//
// Decoding: value = element_table[code] * e8m0_table[scale], one fp32 multiply. Scale byte 0x00 is 2^-127
// (an fp32 subnormal, bits 0x00400000), never 0; 0xFF is NaN, so the whole block decodes to NaN. Every
// element value times every scale that the encoder can produce is exact in fp32; bytes the encoder never
// writes (e.g. scale 0xFE with E5M2 57344) can overflow to +-Inf in the product.
//
// Scalar converters (f32_to_*) are the MX element conversion: RNE, saturate to max finite (+-Inf included,
// the OFP8 SAT mode). NaN input gives FP4 0x0 (FP4 has no NaN; a block marks NaN via its scale), E4M3 0x7F
// and E5M2 0x7E (canonical quiet NaNs). E4M3 has no Inf: 0x7F/0xFF are its only NaNs. E5M2 has Inf
// (0x7C/0xFC) and NaNs 0x7D-0x7F/0xFD-0xFF, which it decodes as such.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace moxi::mx {

inline constexpr int kBlock = 32;

enum class elem_format : uint8_t { FP4_E2M1, FP8_E4M3, FP8_E5M2 };

// Exponent of the largest power of two the element format holds (the emax of the scale rule).
constexpr int elem_emax(elem_format f) {
  return f == elem_format::FP4_E2M1 ? 2 : f == elem_format::FP8_E4M3 ? 8 : 15;
}
// Largest finite element magnitude; encoders saturate to it.
constexpr float elem_max(elem_format f) {
  return f == elem_format::FP4_E2M1 ? 6.0f : f == elem_format::FP8_E4M3 ? 448.0f : 57344.0f;
}

namespace detail {

// 2^e as an fp32, exact for e in [-149, 127]; built from bits so the tables below are constexpr.
constexpr float pow2(int e) {
  if (e >= -126) return std::bit_cast<float>(uint32_t(e + 127) << 23);
  return std::bit_cast<float>(uint32_t(1) << (e + 149));
}

constexpr std::array<float, 256> make_e8m0_table() {
  std::array<float, 256> t{};
  for (int s = 0; s < 255; ++s) t[s] = pow2(s - 127);
  t[255] = std::numeric_limits<float>::quiet_NaN();
  return t;
}

// An OFP8 byte S.E.M with the given field widths and bias; `ieee_specials` selects E5M2's IEEE-style
// all-ones exponent (Inf/NaN), otherwise only the all-ones pattern S.1111.111 is NaN (E4M3).
constexpr std::array<float, 256> make_fp8_table(int mbits, int bias, bool ieee_specials) {
  std::array<float, 256> t{};
  const int ebits = 7 - mbits;
  const int emask = (1 << ebits) - 1;
  const int mmask = (1 << mbits) - 1;
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> mbits) & emask;
    const int m = b & mmask;
    float v = 0.0f;
    if (ieee_specials && e == emask) {
      v = m == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
    } else if (!ieee_specials && e == emask && m == mmask) {
      v = std::numeric_limits<float>::quiet_NaN();
    } else if (e == 0) {
      v = float(m) * pow2(1 - bias - mbits);  // subnormal: m * 2^(emin - mbits)
    } else {
      v = float((1 << mbits) + m) * pow2(e - bias - mbits);
    }
    t[b] = (b & 0x80) ? -v : v;
  }
  return t;
}

}  // namespace detail

// Decode tables, public so kernels can index them directly. kE8m0[0] = 2^-127, kE8m0[255] = NaN.
inline constexpr std::array<float, 256> kE8m0 = detail::make_e8m0_table();
// The spec's 16 E2M1 code points; 0x8 is -0.0.
inline constexpr std::array<float, 16> kFp4 = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
inline constexpr std::array<float, 256> kFp8E4m3 = detail::make_fp8_table(3, 7, false);
inline constexpr std::array<float, 256> kFp8E5m2 = detail::make_fp8_table(2, 15, true);

// ---- scalar pieces ----
// 2^(s-127); 0x00 -> 2^-127 (not 0); 0xFF -> NaN.
inline float e8m0_to_f32(uint8_t s) {
  return kE8m0[s];
}
// Only the low 4 bits are read, so a packed byte's high nibble is ignored.
inline float fp4_to_f32(uint8_t code) {
  return kFp4[code & 0xF];
}
inline float fp8_e4m3_to_f32(uint8_t b) {
  return kFp8E4m3[b];
}
inline float fp8_e5m2_to_f32(uint8_t b) {
  return kFp8E5m2[b];
}
// Element byte (FP4 code in the low nibble) -> value, for any format.
inline float elem_to_f32(elem_format f, uint8_t code) {
  return f == elem_format::FP4_E2M1   ? fp4_to_f32(code)
         : f == elem_format::FP8_E4M3 ? kFp8E4m3[code]
                                      : kFp8E5m2[code];
}

uint8_t f32_to_fp4(float x);
uint8_t f32_to_fp8_e4m3(float x);
uint8_t f32_to_fp8_e5m2(float x);
uint8_t f32_to_elem(elem_format f, float x);

// The E8M0 scale byte the encoder picks for one block of kBlock values (rules at the top of this file).
uint8_t block_scale(elem_format f, const float* x);

// ---- block codecs along a contiguous row of n values, n % 32 == 0 ----
// MXFP4 storage (gpt-oss layout): blocks = n/2 bytes, element 2j in the LOW nibble of byte j;
// scales = n/32 bytes.
void quantize_mxfp4(const float* x, size_t n, uint8_t* blocks, uint8_t* scales);
void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, size_t n, float* out);
// MXFP8 storage: elements = n bytes, scales = n/32 bytes. f must be FP8_E4M3 or FP8_E5M2.
void quantize_mxfp8(elem_format f, const float* x, size_t n, uint8_t* elems, uint8_t* scales);
void dequantize_mxfp8(elem_format f, const uint8_t* elems, const uint8_t* scales, size_t n, float* out);

// Quantize-then-dequantize in one pass (QAT fake-quant, MXFP8 activation quantization); bit-identical to
// dequantize(quantize(x)) for every input, NaN blocks included. out may alias x.
void fake_quantize(elem_format f, const float* x, size_t n, float* out);

// ---- E4M3 rows with one power-of-two scale (DeepSeek-V3.2's FP8 indexer keys, docs/mx-formats.md) ----
// Encoding of a row x[0, n), any n >= 1:
//   - A NaN or Inf anywhere: scale NaN and every element 0, so the row decodes to NaN.
//   - amax = max(max |x[i]|, 1e-4); scale = 2^e with the smallest integer e such that amax <= 448 * 2^e,
//     i.e. 2^ceil(log2(amax / 448)): the UE8M0 rounding of amax / 448 that DeepSeek-V3.2's act_quant and
//     vLLM's indexer-key cache kernel apply, here decided exactly instead of through a rounded division.
//   - Element i = f32_to_fp8_e4m3(x[i] / scale): RNE, and |x[i] / scale| <= 448, so nothing saturates.
// Decoding: value = kFp8E4m3[code] * scale (exact: scale is a power of two in [2^-22, 2^120]).
// Returns the scale.
float quantize_fp8_row(const float* x, size_t n, uint8_t* codes);
// quantize_fp8_row then decode, in one pass; out may alias x.
void fake_quantize_fp8_row(const float* x, size_t n, float* out);

}  // namespace moxi::mx
