// The dispatched MX fake quantization (kernels::fake_quantize: an AVX-512 twin for the FP8 formats where the
// CPU has it) against mx::fake_quantize, which tests/base/mx-test.cpp holds to the OCP MX rules. The twin
// computes the same exact steps in vector form, so the outputs must be bit-identical: random blocks over
// a wide range of magnitudes, exact ties on the element grid, values past the largest finite element,
// fp32 subnormals, signed zeros, all-zero blocks, and NaN / Inf blocks; E4M3 and E5M2; in place too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "moxi/base/mx.h"
#include "moxi/kernels/mx-dispatch.h"
#include "moxi/kernels/x86/cpu.h"

namespace {

namespace mx = moxi::mx;

std::vector<float> test_blocks(uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-140, 120);
  std::vector<float> x;
  for (int b = 0; b < 64; ++b) {  // blocks at scales from fp32-subnormal to huge
    const float s = std::ldexp(1.0f, ex(gen));
    for (int i = 0; i < 32; ++i) x.push_back(nd(gen) * s);
  }
  // Exact ties of the E4M3 / E5M2 grids relative to the block max, and values just around them.
  for (float m : {448.0f, 57344.0f}) {
    std::vector<float> b(32);
    b[0] = m;
    for (int i = 1; i < 32; ++i) b[size_t(i)] = m * (float(i) + 0.5f) / 64.0f * (i % 2 ? 1.0f : -1.0f);
    b[31] = std::nextafter(b[30], 0.0f);
    x.insert(x.end(), b.begin(), b.end());
  }
  std::vector<float> special(32, 0.0f);  // zeros with signs
  for (int i = 0; i < 32; i += 2) special[size_t(i)] = -0.0f;
  x.insert(x.end(), special.begin(), special.end());
  special.assign(32, std::numeric_limits<float>::denorm_min());  // all subnormal
  special[3] = -std::numeric_limits<float>::denorm_min() * 7;
  x.insert(x.end(), special.begin(), special.end());
  special.assign(32, 1.0f);  // a NaN block and an Inf block
  special[5] = std::numeric_limits<float>::quiet_NaN();
  x.insert(x.end(), special.begin(), special.end());
  special[5] = -std::numeric_limits<float>::infinity();
  x.insert(x.end(), special.begin(), special.end());
  return x;
}

TEST(MxFast, Fp8FakeQuantizeIsBitIdenticalToTheReference) {
  std::printf("fake_quantize dispatch: %s\n", moxi::kernels::x86::cpu().avx512 ? "avx512" : "ref");
  for (const auto f : {mx::elem_format::FP8_E4M3, mx::elem_format::FP8_E5M2}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      const std::vector<float> x = test_blocks(seed);
      std::vector<float> want(x.size()), got(x.size(), 1.0f);
      mx::fake_quantize(f, x.data(), x.size(), want.data());
      moxi::kernels::fake_quantize(f, x.data(), x.size(), got.data());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), x.size() * sizeof(float)))
          << "format " << int(f) << " seed " << seed;
      std::vector<float> inplace = x;  // out aliasing x
      moxi::kernels::fake_quantize(f, inplace.data(), inplace.size(), inplace.data());
      EXPECT_EQ(0, std::memcmp(want.data(), inplace.data(), x.size() * sizeof(float)));
    }
  }
}

}  // namespace
