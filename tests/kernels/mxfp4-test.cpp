// Reference MXFP4 matmul against an independent path: mx::dequantize_mxfp4 to fp32 (and mx::fake_quantize
// of x for the MXFP8 activation modes) followed by a plain fp64 dot product written here.
#include "moxi/kernels/ref/mxfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "moxi/base/mx.h"
#include "moxi/kernels/ref/basic.h"

namespace {

namespace ref = moxi::kernels::ref;
namespace mx = moxi::mx;
using ref::act_quant;

// Random MXFP4 weights with a realistic spread of block scales (2^-12 .. 2^2) and every nibble value.
void random_weights(int64_t N, int64_t K, uint64_t seed, std::vector<uint8_t>& blocks,
                    std::vector<uint8_t>& scales) {
  std::mt19937_64 gen(seed);
  blocks.resize(size_t(N * K / 2));
  scales.resize(size_t(N * K / 32));
  for (auto& b : blocks) b = uint8_t(gen());
  std::uniform_int_distribution<int> s(127 - 12, 127 + 2);
  for (auto& v : scales) v = uint8_t(s(gen));
}

std::vector<float> normal(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen) * (gen() % 8 == 0 ? 50.0f : 1.0f);  // outliers spread the MXFP8 scales
  return v;
}

// fp64 reference: y = fake_quant(x) . dequant(W)^T. Also returns sum |x||w| per output, the scale of
// the fp32 rounding error.
void reference(const std::vector<float>& x, const std::vector<uint8_t>& blocks,
               const std::vector<uint8_t>& scales, int64_t T, int64_t N, int64_t K, act_quant act,
               std::vector<double>& y, std::vector<double>& mag) {
  std::vector<float> w(size_t(N * K)), xq = x;
  mx::dequantize_mxfp4(blocks.data(), scales.data(), size_t(N * K), w.data());
  if (act != act_quant::NONE) {
    const auto f = act == act_quant::MXFP8_E4M3 ? mx::elem_format::FP8_E4M3 : mx::elem_format::FP8_E5M2;
    for (int64_t t = 0; t < T; ++t) mx::fake_quantize(f, x.data() + t * K, size_t(K), xq.data() + t * K);
  }
  y.assign(size_t(T * N), 0.0);
  mag.assign(size_t(T * N), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0, m = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(xq[size_t(t * K + k)]) * double(w[size_t(n * K + k)]);
        s += p;
        m += std::fabs(p);
      }
      y[size_t(t * N + n)] = s;
      mag[size_t(t * N + n)] = m;
    }
}

TEST(Mxfp4Ref, MatchesDequantizeAndFp64DotForAllActivationModes) {
  struct Shape {
    int64_t T, N, K;
  };
  for (const Shape sh :
       {Shape{1, 1, 32}, Shape{1, 13, 64}, Shape{3, 8, 96}, Shape{7, 17, 256}, Shape{16, 9, 1024}}) {
    std::vector<uint8_t> blocks, scales;
    random_weights(sh.N, sh.K, uint64_t(sh.N * 131 + sh.K), blocks, scales);
    const std::vector<float> x = normal(size_t(sh.T * sh.K), uint64_t(sh.T + 7));
    for (const act_quant act : {act_quant::NONE, act_quant::MXFP8_E4M3, act_quant::MXFP8_E5M2}) {
      std::vector<float> y(size_t(sh.T * sh.N), -1.0f);
      ref::matmul_mxfp4(x.data(), blocks.data(), scales.data(), y.data(), sh.T, sh.N, sh.K, act);
      std::vector<double> want, mag;
      reference(x, blocks, scales, sh.T, sh.N, sh.K, act, want, mag);
      for (size_t i = 0; i < y.size(); ++i)
        // fp32 sum of K exact products: |err| <= K * 2^-24 * sum|p| (plus the product rounding).
        ASSERT_NEAR(y[i], want[i], double(sh.K + 2) * 0x1p-24 * mag[i] + 1e-30)
            << "T=" << sh.T << " N=" << sh.N << " K=" << sh.K << " act=" << int(act) << " i=" << i;
    }
  }
}

TEST(Mxfp4Ref, ActivationQuantizationChangesTheResult) {
  // Guards against an act mode being silently ignored: x values that MXFP8 must round.
  const int64_t T = 1, N = 4, K = 64;
  std::vector<uint8_t> blocks, scales;
  random_weights(N, K, 5, blocks, scales);
  std::vector<float> x(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) x[size_t(k)] = 1.0f + float(k) * 0.0137f;
  std::vector<float> y0(static_cast<size_t>(N)), y1(y0), y2(y0);
  ref::matmul_mxfp4(x.data(), blocks.data(), scales.data(), y0.data(), T, N, K, act_quant::NONE);
  ref::matmul_mxfp4(x.data(), blocks.data(), scales.data(), y1.data(), T, N, K, act_quant::MXFP8_E4M3);
  ref::matmul_mxfp4(x.data(), blocks.data(), scales.data(), y2.data(), T, N, K, act_quant::MXFP8_E5M2);
  EXPECT_NE(y0, y1);
  EXPECT_NE(y1, y2);
}

TEST(Mxfp4Ref, BitIdenticalToRefMatmulOnDequantizedWeights) {
  const int64_t T = 5, N = 21, K = 160;
  std::vector<uint8_t> blocks, scales;
  random_weights(N, K, 9, blocks, scales);
  const std::vector<float> x = normal(size_t(T * K), 3);
  std::vector<float> w(size_t(N * K)), y(size_t(T * N)), want(size_t(T * N));
  mx::dequantize_mxfp4(blocks.data(), scales.data(), size_t(N * K), w.data());
  ref::matmul(x.data(), w.data(), nullptr, want.data(), T, N, K);
  ref::matmul_mxfp4(x.data(), blocks.data(), scales.data(), y.data(), T, N, K, act_quant::NONE);
  EXPECT_EQ(y, want);
}

TEST(Mxfp4Ref, NanScalePoisonsOnlyItsRow) {
  const int64_t T = 2, N = 3, K = 64;
  std::vector<uint8_t> blocks, scales;
  random_weights(N, K, 11, blocks, scales);
  scales[2] = 0xFF;  // row 1, block 0
  const std::vector<float> x = normal(size_t(T * K), 4);
  std::vector<float> y(size_t(T * N));
  ref::matmul_mxfp4(x.data(), blocks.data(), scales.data(), y.data(), T, N, K, act_quant::NONE);
  for (int64_t t = 0; t < T; ++t) {
    EXPECT_FALSE(std::isnan(y[size_t(t * N + 0)]));
    EXPECT_TRUE(std::isnan(y[size_t(t * N + 1)]));
    EXPECT_FALSE(std::isnan(y[size_t(t * N + 2)]));
  }
}

}  // namespace
