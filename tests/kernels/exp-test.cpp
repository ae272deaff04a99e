// moxi's fp32 exp (ref::exp_f32, kernels/ref/exp.h) against exp computed in fp64 by libm, and its 16-lane
// AVX-512 form (x86::exp_avx512, the exp16 of kda-avx512.cpp) against the scalar one bit for bit. The KDA
// twins are bit-identical to their references only because the two forms are (tests/kernels/backend-ops-test).
//
// Inputs: a dense sweep of [-104, 89] in value, a strided sweep of every binade of it by bit pattern, every
// float of ±[0.3, 0.4] (both sides of the range-reduction boundary ±ln2/2, where n steps from 0 to ±1) and
// every 4th of ±[1/2, 1], every float whose exp is subnormal or rounds to 0 ([-104, -87.3]), every float of
// [88, 89] (overflow to +inf), and the special values. Measured on x86-64 (glibc exp as the fp64 reference):
// max error 0.87 ulp over all sweeps (subnormal results in units of 2^-149). The test allows 2 ulp.
#include "moxi/kernels/ref/exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "moxi/kernels/x86/cpu.h"
#include "moxi/kernels/x86/kda-x86.h"

namespace {

using moxi::kernels::ref::exp_f32;

// |got - e^x| in units of the fp32 spacing at e^x (2^-149 for subnormal e^x); 0 when e^x rounds to +inf in
// fp32 and got is +inf, infinite when only one of them is.
double ulp_error(float got, double want) {
  if (std::isinf(float(want)) || std::isinf(got)) {
    return std::isinf(float(want)) && got == std::numeric_limits<float>::infinity() ? 0.0 : INFINITY;
  }
  const double ulp = want < double(std::numeric_limits<float>::min())
                         ? std::ldexp(1.0, -149)
                         : std::ldexp(1.0, std::ilogb(want) - 23);
  return std::fabs(double(got) - want) / ulp;
}

// Float bit patterns from..to (inclusive, same sign) every `step` patterns.
std::vector<float> by_bits(float from, float to, uint32_t step) {
  uint32_t a = std::bit_cast<uint32_t>(from), b = std::bit_cast<uint32_t>(to);
  if (a > b) std::swap(a, b);  // negative floats: larger bits, smaller value
  std::vector<float> xs;
  xs.reserve(size_t((b - a) / step + 1));
  for (uint64_t i = a; i <= b; i += step) xs.push_back(std::bit_cast<float>(uint32_t(i)));
  return xs;
}

struct worst {
  double err = 0;
  float x = 0;
};

// Max ulp error of exp_f32 over xs against std::exp in fp64.
worst max_error(const std::vector<float>& xs) {
  worst w;
  for (const float x : xs) {
    const double e = ulp_error(exp_f32(x), std::exp(double(x)));
    if (!(e <= w.err)) w = {e, x};  // keeps a NaN error too
  }
  return w;
}

struct named_range {
  std::string name;
  std::vector<float> xs;
};

std::vector<named_range> sweeps() {
  std::vector<named_range> out;
  std::vector<float> dense;
  const int64_t steps = 2'000'000;
  for (int64_t i = 0; i <= steps; ++i) dense.push_back(float(-104.0 + 193.0 * double(i) / double(steps)));
  out.push_back({"dense [-104, 89]", dense});
  std::vector<float> bits = by_bits(-0.0f, -104.0f, 251);
  const std::vector<float> pos = by_bits(0.0f, 89.0f, 251);
  bits.insert(bits.end(), pos.begin(), pos.end());
  out.push_back({"every 251st bit pattern of [-104, 89]", bits});
  std::vector<float> boundary;  // n switches between 0 and +-1 at x = +-ln2/2 = +-0.3466
  for (const auto& [from, to, step] :
       {std::tuple{-0.3f, -0.4f, 1u}, {0.3f, 0.4f, 1u}, {-0.5f, -1.0f, 4u}, {0.5f, 1.0f, 4u}}) {
    const std::vector<float> part = by_bits(from, to, step);
    boundary.insert(boundary.end(), part.begin(), part.end());
  }
  out.push_back({"every float of +-[0.3, 0.4], every 4th of +-[1/2, 1]", boundary});
  out.push_back({"every float of [-104, -87.3] (subnormal / zero results)", by_bits(-87.3f, -104.0f, 1)});
  out.push_back({"every float of [88, 89] (overflow)", by_bits(88.0f, 89.0f, 1)});
  return out;
}

TEST(Exp, WithinTwoUlpOfFp64Exp) {
  for (const named_range& r : sweeps()) {
    const worst w = max_error(r.xs);
    std::printf("%-58s %9zu inputs  max error %.3f ulp at x = %a\n", r.name.c_str(), r.xs.size(), w.err,
                double(w.x));
    EXPECT_LE(w.err, 2.0) << r.name << ": at x = " << w.x << " exp_f32 = " << exp_f32(w.x)
                          << " fp64 exp = " << std::exp(double(w.x));
  }
}

TEST(Exp, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(std::bit_cast<uint32_t>(exp_f32(-inf)), 0u);  // +0
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_f32(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_f32(std::numeric_limits<float>::denorm_min()), 1.0f);
  EXPECT_EQ(exp_f32(std::numeric_limits<float>::max()), inf);
  EXPECT_EQ(std::bit_cast<uint32_t>(exp_f32(-std::numeric_limits<float>::max())), 0u);
  EXPECT_EQ(exp_f32(88.73f), inf);                      // e^88.73 > FLT_MAX
  EXPECT_LT(exp_f32(88.72f), inf);                      // e^88.72 < FLT_MAX
  EXPECT_EQ(exp_f32(-104.0f), 0.0f);                    // e^-104 < 2^-150: rounds to 0
  EXPECT_EQ(exp_f32(-103.0f), std::ldexp(1.0f, -149));  // e^-103 = 1.4 * 2^-149: the smallest subnormal
}

// The inputs of every sweep plus the special values, for the bit-identity test.
std::vector<float> all_inputs() {
  std::vector<float> xs;
  for (const named_range& r : sweeps()) xs.insert(xs.end(), r.xs.begin(), r.xs.end());
  const float inf = std::numeric_limits<float>::infinity();
  for (const float x :
       {inf, -inf, std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        std::numeric_limits<float>::signaling_NaN(), 0.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
        std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 1e30f, -1e30f})
    xs.push_back(x);
  return xs;
}

TEST(Exp, SixteenLaneFormIsBitIdenticalToTheScalarOne) {
#if defined(__x86_64__)
  if (!moxi::kernels::x86::cpu().avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  const std::vector<float> xs = all_inputs();
  std::vector<float> got(xs.size());
  moxi::kernels::x86::exp_avx512(xs.data(), got.data(), int64_t(xs.size()));
  size_t diff = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const uint32_t want = std::bit_cast<uint32_t>(exp_f32(xs[i])), have = std::bit_cast<uint32_t>(got[i]);
    if (want != have && ++diff <= 5) {
      ADD_FAILURE() << "x = " << std::hexfloat << xs[i] << ": scalar " << std::bit_cast<float>(want) << " (0x"
                    << std::hex << want << "), 16-lane " << std::bit_cast<float>(have) << " (0x" << have
                    << ")";
    }
  }
  EXPECT_EQ(diff, 0u) << "of " << xs.size() << " inputs";
  // A masked tail shorter than a vector: lanes past n are neither read nor written.
  float tail_in[5] = {0.5f, -3.0f, 10.0f, -90.0f, 1.0f}, tail_out[6] = {0, 0, 0, 0, 0, 42.0f};
  moxi::kernels::x86::exp_avx512(tail_in, tail_out, 5);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(tail_out[i]), std::bit_cast<uint32_t>(exp_f32(tail_in[i])));
  EXPECT_EQ(tail_out[5], 42.0f);
#else
  GTEST_SKIP() << "x86-64 only";
#endif
}

}  // namespace
