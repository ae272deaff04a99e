// IEEE binary16 (F16) and bfloat16 (BF16) scalar conversions. Float -> BF16/F16 rounds to nearest even
// and keeps NaN a (quiet) NaN; the reverse directions are exact.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace moxi {

inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(uint32_t(h) << 16);
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN stays quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even; overflow to Inf is correct
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace moxi
