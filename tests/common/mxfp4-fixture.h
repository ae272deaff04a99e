// Test scaffolding for the MXFP4 kernels (tests/kernels/backend-ops-test.cpp, mxfp4-amx-test.cpp):
// random MXFP4 weights and activations, the fp64 magnitude every rounding error is bounded by, and the
// comparison of a kernel's output against ref::matmul_mxfp4 under that bound.
//
// Tolerances (per output, relative to mag = sum_k |x_k w_k| in fp64):
//   exact-product paths (both sides fp32 sums of the same exact products in different orders):
//     |err| <= 2 (K+2) 2^-24 mag                                  = order_bound(K)
//   paths that round x to bf16 (relative error <= 2^-8 per element) on top:
//     |err| <= (2^-8 + 2 (K+2) 2^-24) mag                         = allowed_rel(K, true)
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "moxi/base/mx.h"
#include "moxi/kernels/ref/mxfp4.h"

namespace moxi::testing {

struct mxfp4_weights {
  std::vector<uint8_t> blocks, scales;  // gpt-oss layout: u8 [N, K/32, 16] and E8M0 u8 [N, K/32]
};

// Random codes; scales 2^-14 .. 2^3, so products stay far from fp32 overflow and underflow.
inline mxfp4_weights random_mxfp4_weights(int64_t N, int64_t K, uint64_t seed) {
  std::mt19937_64 gen(seed);
  mxfp4_weights w;
  w.blocks.resize(size_t(N * K / 2));
  w.scales.resize(size_t(N * K / 32));
  for (auto& b : w.blocks) b = uint8_t(gen());
  std::uniform_int_distribution<int> s(127 - 14, 127 + 3);
  for (auto& v : w.scales) v = uint8_t(s(gen));
  return w;
}

// Normal activations with one element in 16 scaled by 30 (outliers, as real activations have).
inline std::vector<float> mxfp4_activations(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen) * (gen() % 16 == 0 ? 30.0f : 1.0f);
  return v;
}

// sum_k |xq_k w_k| per output in fp64, xq the activations as the kernels see them (after the MXFP8
// fake-quantization, if any).
inline std::vector<double> mxfp4_magnitudes(const std::vector<float>& x, const mxfp4_weights& w, int64_t T,
                                            int64_t N, int64_t K, kernels::ref::act_quant act) {
  std::vector<float> wf(size_t(N * K)), xq = x;
  mx::dequantize_mxfp4(w.blocks.data(), w.scales.data(), size_t(N * K), wf.data());
  if (act != kernels::ref::act_quant::NONE) {
    const auto f =
        act == kernels::ref::act_quant::MXFP8_E4M3 ? mx::elem_format::FP8_E4M3 : mx::elem_format::FP8_E5M2;
    for (int64_t t = 0; t < T; ++t) mx::fake_quantize(f, x.data() + t * K, size_t(K), xq.data() + t * K);
  }
  std::vector<double> m(size_t(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t i = 0; i < K; ++i)
        s += std::fabs(double(xq[size_t(t * K + i)]) * double(wf[size_t(n * K + i)]));
      m[size_t(t * N + n)] = s;
    }
  return m;
}

inline double order_bound(int64_t K) {
  return 2.0 * double(K + 2) * 0x1p-24;
}

inline double allowed_rel(int64_t K, bool rounds_x) {
  return rounds_x ? 0x1p-8 + order_bound(K) : order_bound(K);
}

struct mxfp4_error_stats {
  double worst_ratio = 0;  // max |err| / allowed
  double nrmse = 0;
  int nan_mismatch = 0;  // outputs NaN on one side only
};

// got vs want (ref::matmul_mxfp4) with |err| <= allowed_rel * mag per output.
inline mxfp4_error_stats compare_to_ref(const std::vector<float>& got, const std::vector<float>& want,
                                        const std::vector<double>& mag, double allowed_rel) {
  mxfp4_error_stats s;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]) || std::isnan(got[i])) {
      s.nan_mismatch += std::isnan(want[i]) != std::isnan(got[i]);
      continue;
    }
    const double e = std::fabs(double(got[i]) - double(want[i]));
    const double allowed = allowed_rel * mag[i] + 1e-37;
    s.worst_ratio = std::max(s.worst_ratio, e / allowed);
    num += e * e;
    den += double(want[i]) * double(want[i]);
  }
  s.nrmse = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return s;
}

// Expects got to match want within allowed_rel(K, rounds_x) (nRMSE <= 4e-3 with bf16-rounded x, else
// 1e-5; NaN exactly where want has one) and folds its figures into `worst`, for the test's printout.
inline void expect_matches_ref(const std::vector<float>& got, const std::vector<float>& want,
                               const std::vector<double>& mag, int64_t K, bool rounds_x,
                               const std::string& where, mxfp4_error_stats& worst) {
  const mxfp4_error_stats s = compare_to_ref(got, want, mag, allowed_rel(K, rounds_x));
  worst.worst_ratio = std::max(worst.worst_ratio, s.worst_ratio);
  worst.nrmse = std::max(worst.nrmse, s.nrmse);
  EXPECT_EQ(s.nan_mismatch, 0) << where;
  EXPECT_LE(s.worst_ratio, 1.0) << where;
  EXPECT_LE(s.nrmse, rounds_x ? 4e-3 : 1e-5) << where;
}

// Prints the worst figures per path: worst[2i] exact x, worst[2i+1] x rounded to bf16.
inline void print_worst(const std::vector<mxfp4_error_stats>& worst, const std::vector<std::string>& names) {
  for (size_t i = 0; i < worst.size(); ++i)
    if (worst[i].nrmse > 0)
      std::printf("%-24s x %s: worst |err|/bound %.3f, worst nRMSE %.2e\n", names[i / 2].c_str(),
                  i % 2 ? "rounded to bf16" : "exact          ", worst[i].worst_ratio, worst[i].nrmse);
}

}  // namespace moxi::testing
