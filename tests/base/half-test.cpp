// F16/BF16 conversions against independent facts: every F16 bit pattern decodes to the value the IEEE
// binary16 formula gives (computed here in fp64), and encoding round-trips and rounds ties to even.
#include "moxi/base/half.h"

#include <gtest/gtest.h>

#include <cmath>

namespace {

double f16_formula(uint16_t h) {
  const int sign = (h >> 15) ? -1 : 1;
  const int exp = (h >> 10) & 31;
  const int man = h & 1023;
  if (exp == 0) return sign * std::ldexp(double(man), -24);
  if (exp == 31) return man ? NAN : sign * INFINITY;
  return sign * std::ldexp(1.0 + man / 1024.0, exp - 15);
}

TEST(Half, EveryF16PatternDecodesPerFormulaAndRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = f16_formula(uint16_t(h));
    const float got = moxi::f16_to_f32(uint16_t(h));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << h;
      continue;
    }
    ASSERT_EQ(double(got), want) << h;
    ASSERT_EQ(moxi::f32_to_f16(got), uint16_t(h)) << h;
  }
}

TEST(Half, F16RoundsTiesToEvenAndOverflows) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to the even mantissa (1.0).
  EXPECT_EQ(moxi::f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3*2^-11 is halfway between 1+2^-10 (odd) and 1+2^-9 (even): goes up.
  EXPECT_EQ(moxi::f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(moxi::f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(moxi::f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(moxi::f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and min subnormal -> 0
  EXPECT_EQ(moxi::f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 ulp -> 2
}

TEST(Half, Bf16IsTheUpperHalfRoundedToEven) {
  EXPECT_EQ(moxi::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(moxi::f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(moxi::f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(moxi::f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(moxi::bf16_to_f32(moxi::f32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = moxi::bf16_to_f32(uint16_t(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(moxi::f32_to_bf16(f), uint16_t(h));
    }
  }
}

}  // namespace
