// Basic reference kernels (matmul, norms, activations) against fp64 formulas written here.
#include "moxi/kernels/ref/basic.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "moxi/base/half.h"

namespace {

namespace ref = moxi::kernels::ref;
using Vec = std::vector<float>;

Vec normal(size_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, sd);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(Basic, MatmulMatchesFp64WithAndWithoutBias) {
  const int64_t T = 5, N = 19, K = 33;  // N covers the 8-wide blocks and the remainder
  const Vec x = normal(size_t(T * K), 1), w = normal(size_t(N * K), 2), b = normal(size_t(N), 3);
  Vec y(size_t(T * N)), yb(size_t(T * N));
  ref::matmul(x.data(), w.data(), nullptr, y.data(), T, N, K);
  ref::matmul(x.data(), w.data(), b.data(), yb.data(), T, N, K);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(x[size_t(t * K + k)]) * w[size_t(n * K + k)];
      EXPECT_NEAR(y[size_t(t * N + n)], acc, 1e-5);
      // The blocking keeps the plain loop's summation order, so results are bit-identical to it.
      float plain = 0.0f;
      for (int64_t k = 0; k < K; ++k) plain += x[size_t(t * K + k)] * w[size_t(n * K + k)];
      EXPECT_EQ(y[size_t(t * N + n)], plain);
      EXPECT_NEAR(yb[size_t(t * N + n)], acc + b[size_t(n)], 1e-5);
    }
  }
}

TEST(Basic, MatmulBf16EqualsF32MatmulOnWidenedWeights) {
  const int64_t T = 3, N = 4, K = 17;
  const Vec x = normal(size_t(T * K), 4), w = normal(size_t(N * K), 5);
  std::vector<uint16_t> wb(w.size());
  Vec wf(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    wb[i] = moxi::f32_to_bf16(w[i]);
    wf[i] = moxi::bf16_to_f32(wb[i]);
  }
  Vec y1(size_t(T * N)), y2(size_t(T * N));
  ref::matmul_bf16(x.data(), wb.data(), nullptr, y1.data(), T, N, K);
  ref::matmul(x.data(), wf.data(), nullptr, y2.data(), T, N, K);
  EXPECT_EQ(y1, y2);  // same widened values, same summation order
}

TEST(Basic, MatmulBf16PanelsEqualsTheRowLayout) {
  // N: two whole panels and a padded one; K odd: the last K-pair holds one column and a zero
  const int64_t T = 3, N = 37, K = 19;
  const Vec x = normal(size_t(T * K), 11), w = normal(size_t(N * K), 12), b = normal(size_t(N), 13);
  std::vector<uint16_t> wb(w.size());
  for (size_t i = 0; i < w.size(); ++i) wb[i] = moxi::f32_to_bf16(w[i]);
  std::vector<uint16_t> wp(size_t(ref::bf16_panels_size(N, K)), 0xFFFF);
  ASSERT_EQ(wp.size(), size_t(48 * (K + 1)));
  ref::pack_bf16_panels(wb.data(), N, K, wp.data());
  // Panel p, K-pair j: 16 rows x 2 columns (2j, 2j + 1), 32 elements.
  for (int64_t n = 0; n < 48; ++n)
    for (int64_t k = 0; k < K + 1; ++k)
      ASSERT_EQ(wp[size_t(((n / 16) * (K + 1) / 2 + k / 2) * 32 + (n % 16) * 2 + k % 2)],
                n < N && k < K ? wb[size_t(n * K + k)] : 0)
          << "n=" << n << " k=" << k;
  for (const float* bias : {static_cast<const float*>(nullptr), b.data()}) {
    Vec y1(size_t(T * N)), y2(size_t(T * N));
    ref::matmul_bf16(x.data(), wb.data(), bias, y1.data(), T, N, K);
    ref::matmul_bf16_panels(x.data(), wp.data(), bias, y2.data(), T, N, K);
    EXPECT_EQ(y1, y2);  // same values, same summation order
  }
}

TEST(Basic, RmsNormAndLayerNormMatchFp64) {
  const int64_t rows = 4, D = 48;
  Vec x = normal(size_t(rows * D), 6, 5.0f);
  for (int64_t d = 0; d < D; ++d) x[size_t(d)] += 100.0f;  // a large-mean row stresses LayerNorm's variance
  const Vec w = normal(size_t(D), 7), b = normal(size_t(D), 8);
  Vec y(x.size()), yl(x.size()), yn(x.size());
  ref::rms_norm(x.data(), w.data(), y.data(), rows, D, 1e-5f);
  ref::layer_norm(x.data(), w.data(), b.data(), yl.data(), rows, D, 1e-6f);
  ref::rms_norm(x.data(), nullptr, yn.data(), rows, D, 1e-5f);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0, mean = 0, var = 0;
    for (int64_t d = 0; d < D; ++d) {
      ss += double(x[size_t(r * D + d)]) * x[size_t(r * D + d)];
      mean += x[size_t(r * D + d)];
    }
    mean /= D;
    for (int64_t d = 0; d < D; ++d) var += (x[size_t(r * D + d)] - mean) * (x[size_t(r * D + d)] - mean);
    var /= D;
    for (int64_t d = 0; d < D; ++d) {
      const size_t i = size_t(r * D + d);
      const double rms = x[i] / std::sqrt(ss / D + 1e-5);
      EXPECT_NEAR(y[i], w[size_t(d)] * rms, 2e-6 * (1 + std::abs(w[size_t(d)] * rms)));
      EXPECT_NEAR(yn[i], rms, 2e-6 * (1 + std::abs(rms)));
      const double ln = (x[i] - mean) / std::sqrt(var + 1e-6) * w[size_t(d)] + b[size_t(d)];
      EXPECT_NEAR(yl[i], ln, 1e-5 * (1 + std::abs(ln)));
    }
  }
  // In place gives the same result.
  Vec xi = x;
  ref::rms_norm(xi.data(), w.data(), xi.data(), rows, D, 1e-5f);
  EXPECT_EQ(xi, y);
}

TEST(Basic, L2NormMatchesFlaFormula) {
  const int64_t rows = 3, D = 20;
  Vec x = normal(size_t(rows * D), 9);
  for (int64_t d = 0; d < D; ++d) x[size_t(d)] = 0.0f;  // a zero row stays zero (eps 1e-6, no NaN)
  Vec y(x.size());
  ref::l2norm(x.data(), y.data(), rows, D);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t d = 0; d < D; ++d) ss += double(x[size_t(r * D + d)]) * x[size_t(r * D + d)];
    for (int64_t d = 0; d < D; ++d) {
      EXPECT_NEAR(y[size_t(r * D + d)], x[size_t(r * D + d)] / std::sqrt(ss + 1e-6), 1e-6);
    }
  }
}

TEST(Basic, ActivationsMatchTorchDefinitions) {
  for (float x : {-100.0f, -20.5f, -3.0f, -0.5f, 0.0f, 0.7f, 5.0f, 19.9f, 20.0f, 20.1f, 50.0f}) {
    const double xd = x;
    const double sig = 1 / (1 + std::exp(-xd));
    EXPECT_NEAR(ref::sigmoid(x), sig, 1e-7);
    EXPECT_NEAR(ref::silu(x), xd * sig, 1e-6 * (1 + std::abs(xd)));
    // torch softplus threshold 20: linear strictly above 20.
    const double sp = xd > 20 ? xd : std::log1p(std::exp(xd));
    EXPECT_NEAR(ref::softplus(x), sp, 1e-6 * (1 + sp));
  }
  EXPECT_EQ(ref::softplus(20.5f), 20.5f);
  const Vec g = {-2.0f, 0.0f, 3.0f}, u = {1.5f, -2.0f, 0.25f};
  Vec y(3);
  ref::swiglu(g.data(), u.data(), y.data(), 3);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(y[i], g[i] / (1 + std::exp(-double(g[i]))) * u[i], 1e-6);
  ref::mul_sigmoid(u.data(), g.data(), y.data(), 3);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(y[i], u[i] / (1 + std::exp(-double(g[i]))), 1e-6);
}

TEST(Basic, SoftmaxMatchesFp64AndHandlesMaskedRows) {
  const float inf = std::numeric_limits<float>::infinity();
  const Vec x = {1.0f, 2.0f, -inf, 1000.0f, 999.0f, 0.0f, -inf, -inf, -inf};
  Vec y(x.size());
  ref::softmax(x.data(), y.data(), 3, 3);
  const double e1 = std::exp(-1.0);
  EXPECT_NEAR(y[0], e1 / (1 + e1), 1e-7);
  EXPECT_NEAR(y[1], 1 / (1 + e1), 1e-7);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_NEAR(y[3], 1 / (1 + e1 + std::exp(-1000.0)), 1e-7);  // no overflow
  for (int i = 6; i < 9; ++i) EXPECT_EQ(y[size_t(i)], 0.0f);  // fully masked row: zeros, not NaN
}

}  // namespace
