// IEEE binary16 conversions done with integer bit manipulation, so they do not depend on F16C or on the
// compiler's _Float16 support; round to nearest even, subnormals kept, overflow to Inf.
#include "moxi/base/half.h"

#include <cmath>

namespace moxi {

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in float
    const float v = std::ldexp(float(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520 -> Inf
  if (a < 0x38800000u) {  // below the smallest normal 2^-14: subnormal grid of 2^-24, RNE via nearbyint
    const float v = std::bit_cast<float>(a);
    return uint16_t(sign | uint16_t(std::nearbyint(std::ldexp(v, 24))));
  }
  // Normal: rebias the exponent and round the 13 dropped mantissa bits to nearest even.
  uint32_t r = a - (112u << 23);
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

}  // namespace moxi
