// Ops tests of the fast dense matmul (kernels/matmul-dispatch.h) against ref::matmul and ref::matmul_bf16
// over shapes across the 4-row x 6-token tile, the 16-lane K step (masked tails) and the token chunking,
// with and without bias; and the REF variant / ref_kernels_scope switch being the reference bit for bit.
//
// Tolerance (per output, mag = sum_k |x_k w_k| in fp64): both sides sum the same exact fp32 products (bf16
// weights widen exactly) in different orders, so |err| <= 2 (K+2) 2^-24 mag (+ the bias add's rounding).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/basic.h"

namespace {

namespace k = moxi::kernels;

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen) * (gen() % 16 == 0 ? 30.0f : 1.0f);
  return v;
}

uint16_t to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}
float from_bf16_bits(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& x,
                  const std::vector<float>& w, const float* bias, int64_t T, int64_t N, int64_t K) {
  const double eps = 2.0 * double(K + 2) * std::ldexp(1.0, -24);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double mag = bias ? std::fabs(double(bias[n])) : 0.0;
      for (int64_t kk = 0; kk < K; ++kk)
        mag += std::fabs(double(x[size_t(t * K + kk)]) * w[size_t(n * K + kk)]);
      const double err = std::fabs(double(got[size_t(t * N + n)]) - want[size_t(t * N + n)]);
      ASSERT_LE(err, eps * mag + 1e-30) << "T=" << T << " N=" << N << " K=" << K << " t=" << t << " n=" << n;
    }
}

struct shape {
  int64_t T, N, K;
};

const shape kShapes[] = {{1, 1, 1},     {1, 7, 15},     {1, 33, 16},   {2, 64, 17},   {3, 5, 100},
                         {5, 130, 64},  {6, 12, 48},    {7, 9, 257},   {13, 67, 96},  {1, 300, 1024},
                         {37, 41, 200}, {64, 20, 2048}, {200, 19, 33}, {100, 4, 4096}};

TEST(MatmulFast, F32MatchesRefWithinSummationOrder) {
  if (!k::matmul_supported(k::matmul_variant::AVX512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  uint64_t seed = 1;
  for (const auto& s : kShapes)
    for (bool with_bias : {false, true}) {
      const auto x = randn(size_t(s.T * s.K), seed++), w = randn(size_t(s.N * s.K), seed++);
      const auto b = randn(size_t(s.N), seed++);
      const float* bias = with_bias ? b.data() : nullptr;
      std::vector<float> want(size_t(s.T * s.N)), got(want.size(), -1.0f);
      k::ref::matmul(x.data(), w.data(), bias, want.data(), s.T, s.N, s.K);
      k::matmul(x.data(), w.data(), bias, got.data(), s.T, s.N, s.K, k::matmul_variant::AVX512);
      expect_close(got, want, x, w, bias, s.T, s.N, s.K);
    }
}

TEST(MatmulFast, Bf16WeightsMatchRefWithinSummationOrder) {
  if (!k::matmul_supported(k::matmul_variant::AVX512)) GTEST_SKIP() << "no AVX-512 on this CPU";
  uint64_t seed = 100;
  for (const auto& s : kShapes) {
    const auto x = randn(size_t(s.T * s.K), seed++);
    auto wf = randn(size_t(s.N * s.K), seed++);
    std::vector<uint16_t> wb(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
      wb[i] = to_bf16_bits(wf[i]);
      wf[i] = from_bf16_bits(wb[i]);  // the values the kernels see, for the magnitude bound
    }
    std::vector<float> want(size_t(s.T * s.N)), got(want.size(), -1.0f);
    k::ref::matmul_bf16(x.data(), wb.data(), nullptr, want.data(), s.T, s.N, s.K);
    k::matmul_bf16(x.data(), wb.data(), nullptr, got.data(), s.T, s.N, s.K, k::matmul_variant::AVX512);
    expect_close(got, want, x, wf, nullptr, s.T, s.N, s.K);
  }
}

TEST(MatmulFast, RefVariantAndScopeAreTheReferenceBitForBit) {
  const int64_t T = 9, N = 37, K = 70;
  const auto x = randn(size_t(T * K), 7), w = randn(size_t(N * K), 8);
  std::vector<float> want(size_t(T * N)), got(want.size());
  k::ref::matmul(x.data(), w.data(), nullptr, want.data(), T, N, K);
  k::matmul(x.data(), w.data(), nullptr, got.data(), T, N, K, k::matmul_variant::REF);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  {
    k::ref_kernels_scope scope;
    EXPECT_FALSE(k::fast_kernels());
    std::fill(got.begin(), got.end(), 0.0f);
    k::matmul(x.data(), w.data(), nullptr, got.data(), T, N, K);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
  }
  EXPECT_EQ(k::fast_kernels(), k::matmul_best_variant() != k::matmul_variant::REF);
}

TEST(MatmulFast, EmptyShapesWriteNothing) {
  std::vector<float> y(4, 5.0f);
  const float x[4] = {1, 2, 3, 4};
  k::matmul(x, x, nullptr, y.data(), 0, 2, 2);
  k::matmul(x, x, nullptr, y.data(), 2, 0, 2);
  for (float v : y) EXPECT_EQ(v, 5.0f);
}

}  // namespace
