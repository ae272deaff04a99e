// Op tests of every registered kernel backend against the scalar reference (kernels/backend.h): one table
// of op cases, each a shape sweep with its bound (bit-identical, or a stated fp64 bound), run over every
// backend other than the reference. A backend this CPU cannot run, or one that runs the reference's code
// for the op, is reported as skipped with the reason ("not run"), never compared with itself.
// MOXI_TEST_BACKEND=name runs one backend; --gtest_filter='*_on_avx512_bf16' does the same by test name.
//
// Bounds (per output, mag = sum_k |x_k w_k| in fp64 on the values the kernel sees):
//   dense matmul (f32 and bf16 weights, which widen exactly): both sides sum the same exact fp32 products
//     in different orders: |err| <= 2 (K+2) 2^-24 mag (+ the bias add's rounding).
//   MXFP4 matmul: that bound where the products are exact (x f32 on the AVX512 variant; MXFP8 activations,
//     which bf16 holds exactly); where x is rounded to bf16 (relative error <= 2^-8 per element) on top,
//     |err| <= (2^-8 + 2 (K+2) 2^-24) mag and the normalized RMSE <= 4e-3 (tests/common/mxfp4-fixture.h).
//   Everything else (MX fake-quant, KDA step and chunked prefill, MLA absorption and attention, DSA
//     indexer scores, the threaded KDA cores and MoE experts) is bit-identical: the twins perform the
//     reference's operations in the same order, without FMA contraction (the test fails if they do).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/mxfp4-fixture.h"
#include "moxi/base/mx.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/kernels/ref/kda.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/kernels/ref/mxfp4.h"
#include "moxi/kernels/x86/backend.h"
#include "moxi/kernels/x86/cpu.h"

namespace {

namespace k = moxi::kernels;
namespace ref = moxi::kernels::ref;
namespace mx = moxi::mx;
using k::act_quant;
using Vec = std::vector<float>;

// ---- data ----

Vec normal(std::mt19937_64& gen, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

Vec uniform(std::mt19937_64& gen, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Normal with one element in 16 scaled by 30 (outliers, as real activations have).
Vec randn_outliers(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = d(gen) * (gen() % 16 == 0 ? 30.0f : 1.0f);
  return v;
}

bool same_bits(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- dense matmul ----

void expect_within_order_bound(const Vec& got, const Vec& want, const Vec& x, const Vec& w, const float* bias,
                               int64_t T, int64_t N, int64_t K) {
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

struct mm_shape {
  int64_t T, N, K;
};
// Across the 4-row x 6-token tile, the 16-lane K step (masked tails) and the token chunking.
const mm_shape kMatmulShapes[] = {{1, 1, 1},     {1, 7, 15},     {1, 33, 16},   {2, 64, 17},   {3, 5, 100},
                                  {5, 130, 64},  {6, 12, 48},    {7, 9, 257},   {13, 67, 96},  {1, 300, 1024},
                                  {37, 41, 200}, {64, 20, 2048}, {200, 19, 33}, {100, 4, 4096}};

void matmul_f32(const k::backend& be) {
  uint64_t seed = 1;
  for (const auto& s : kMatmulShapes)
    for (bool with_bias : {false, true}) {
      const Vec x = randn_outliers(size_t(s.T * s.K), seed++), w = randn_outliers(size_t(s.N * s.K), seed++);
      const Vec b = randn_outliers(size_t(s.N), seed++);
      const float* bias = with_bias ? b.data() : nullptr;
      Vec want(size_t(s.T * s.N)), got(want.size(), -1.0f);
      ref::matmul(x.data(), w.data(), bias, want.data(), s.T, s.N, s.K);
      be.matmul(x.data(), w.data(), bias, got.data(), s.T, s.N, s.K);
      expect_within_order_bound(got, want, x, w, bias, s.T, s.N, s.K);
    }
  // Empty shapes write nothing.
  Vec y(4, 5.0f);
  const float x[4] = {1, 2, 3, 4};
  be.matmul(x, x, nullptr, y.data(), 0, 2, 2);
  be.matmul(x, x, nullptr, y.data(), 2, 0, 2);
  for (float v : y) EXPECT_EQ(v, 5.0f);
}

// wf's values as bf16 bits (truncated); wf becomes the values the kernels see, for the magnitude bound.
std::vector<uint16_t> truncate_to_bf16(Vec& wf) {
  std::vector<uint16_t> wb(wf.size());
  for (size_t i = 0; i < wf.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &wf[i], 4);
    wb[i] = uint16_t(u >> 16);
    u = uint32_t(wb[i]) << 16;
    std::memcpy(&wf[i], &u, 4);
  }
  return wb;
}

void matmul_bf16(const k::backend& be) {
  uint64_t seed = 100;
  for (const auto& s : kMatmulShapes) {
    const Vec x = randn_outliers(size_t(s.T * s.K), seed++);
    Vec wf = randn_outliers(size_t(s.N * s.K), seed++);
    const std::vector<uint16_t> wb = truncate_to_bf16(wf);
    Vec want(size_t(s.T * s.N)), got(want.size(), -1.0f);
    ref::matmul_bf16(x.data(), wb.data(), nullptr, want.data(), s.T, s.N, s.K);
    be.matmul_bf16(x.data(), wb.data(), nullptr, got.data(), s.T, s.N, s.K);
    expect_within_order_bound(got, want, x, wf, nullptr, s.T, s.N, s.K);
  }
}

// BF16 weights in 16-row panels: the packing puts W[n][k] where ref::bf16_panel_index says (rows past N
// zero); the backend's product is within the summation-order bound of the row-layout reference, and each
// row of a T-token product is bit for bit that token's product alone (every output one chain over k in
// order, whatever the token and panel tiles, so a batch never changes a sequence's result). From the
// backend's tile threshold on (x86::dense_tile_min_tokens: AMX tiles, another order) the bound holds and a
// token's row is bit for bit the same wherever it sits in the batch (tile rows are independent).
void matmul_bf16_panels(const k::backend& be) {
  std::vector<mm_shape> shapes(std::begin(kMatmulShapes), std::end(kMatmulShapes));
  // Across the 3-panel x 8-token tile: panel and group tails, 8/9/16/17 tokens, a chunk of tokens; then
  // prefill sizes (the AMX tiles: 16-token tiles, 32-row panel pairs, the 512 K-chunk, odd panels).
  shapes.insert(shapes.end(), {{8, 48, 64},
                               {9, 49, 31},
                               {16, 96, 1024},
                               {17, 47, 5},
                               {1, 16, 3},
                               {4, 112, 80},
                               {60, 33, 4000},
                               {128, 16, 32},
                               {131, 50, 544},
                               {300, 97, 1024},
                               {260, 33, 96}});
  const int64_t tiles_from = moxi::kernels::x86::dense_tile_min_tokens(be);
  uint64_t seed = 300;
  for (const auto& s : shapes)
    for (bool with_bias : {false, true}) {
      const Vec x = randn_outliers(size_t(s.T * s.K), seed++), b = randn_outliers(size_t(s.N), seed++);
      Vec wf = randn_outliers(size_t(s.N * s.K), seed++);
      const std::vector<uint16_t> wb = truncate_to_bf16(wf);
      const int64_t P = (s.N + 15) / 16;
      const int64_t K2 = s.K + s.K % 2;  // K-pairs of 16 rows x 2 columns, an odd K's last one half zero
      ASSERT_EQ(ref::bf16_panels_size(s.N, s.K), P * 16 * K2);
      std::vector<uint16_t> wp(size_t(P * 16 * K2), 0xFFFF);
      ref::pack_bf16_panels(wb.data(), s.N, s.K, wp.data());
      for (int64_t n = 0; n < P * 16; ++n)
        for (int64_t kk = 0; kk < K2; ++kk)
          ASSERT_EQ(wp[size_t(((n / 16) * K2 / 2 + kk / 2) * 32 + (n % 16) * 2 + kk % 2)],
                    n < s.N && kk < s.K ? wb[size_t(n * s.K + kk)] : 0)
              << "n=" << n << " k=" << kk;
      const float* bias = with_bias ? b.data() : nullptr;
      Vec want(size_t(s.T * s.N)), got(want.size(), -1.0f);
      ref::matmul_bf16(x.data(), wb.data(), bias, want.data(), s.T, s.N, s.K);
      be.matmul_bf16_panels(x.data(), wp.data(), bias, got.data(), s.T, s.N, s.K);
      expect_within_order_bound(got, want, x, wf, bias, s.T, s.N, s.K);
      if (s.T < tiles_from) {
        for (int64_t t = 0; t < s.T; t += std::max<int64_t>(1, s.T / 5)) {
          Vec one(size_t(s.N), -1.0f);
          be.matmul_bf16_panels(x.data() + t * s.K, wp.data(), bias, one.data(), 1, s.N, s.K);
          ASSERT_EQ(0, std::memcmp(one.data(), got.data() + t * s.N, size_t(s.N) * sizeof(float)))
              << "token " << t << " of T=" << s.T << " N=" << s.N << " K=" << s.K;
        }
        continue;
      }
      Vec xr(x.size()), gr(got.size(), -1.0f);  // the tokens in reverse order
      for (int64_t t = 0; t < s.T; ++t)
        std::memcpy(xr.data() + t * s.K, x.data() + (s.T - 1 - t) * s.K, size_t(s.K) * sizeof(float));
      be.matmul_bf16_panels(xr.data(), wp.data(), bias, gr.data(), s.T, s.N, s.K);
      for (int64_t t = 0; t < s.T; ++t)
        ASSERT_EQ(0, std::memcmp(gr.data() + t * s.N, got.data() + (s.T - 1 - t) * s.N, size_t(s.N) * 4))
            << "token " << t << " of T=" << s.T << " N=" << s.N << " K=" << s.K;
    }
}

// ---- MXFP4 matmul ----

using mxw = moxi::testing::mxfp4_weights;

k::expert_matrix packed_by(const k::backend& be, const mxw& w, int64_t N, int64_t K) {
  k::expert_matrix m;
  m.N = N;
  m.K = K;
  m.blocks = w.blocks.data();
  m.scales = w.scales.data();
  m.packed = be.pack_mxfp4(m.blocks, m.scales, N, K);
  return m;
}

// Whether the backend's MXFP4 matmul rounds fp32 activations to bf16 (every x86 variant but AVX512 does;
// a new backend states its numerics here).
bool rounds_x_to_bf16(const k::backend& be) {
  return k::x86::mxfp4_variant_of(be) != k::x86::mxfp4_variant::AVX512;
}

void matmul_mxfp4(const k::backend& be) {
  struct shape {
    int64_t T, N, K;
  };
  // Odd N, K across the GEMM's K-chunk, T = 1..200 across the GEMV/GEMM switch and the token tiles.
  const shape shapes[] = {{1, 1, 32},     {1, 17, 64},   {2, 16, 96},    {3, 33, 160},   {4, 31, 1056},
                          {5, 40, 64},    {7, 15, 2080}, {12, 48, 256},  {13, 50, 128},  {16, 257, 512},
                          {25, 33, 1088}, {31, 100, 96}, {64, 64, 2048}, {1, 300, 4096}, {200, 40, 320},
                          {64, 17, 32},   {9, 1, 1024},  {2, 129, 3072}};
  const bool rounds_x = rounds_x_to_bf16(be);
  std::vector<moxi::testing::mxfp4_error_stats> seen(2);
  for (const shape sh : shapes) {
    const mxw w = moxi::testing::random_mxfp4_weights(sh.N, sh.K, uint64_t(sh.T * 1000 + sh.N * 7 + sh.K));
    const Vec x = moxi::testing::mxfp4_activations(size_t(sh.T * sh.K), uint64_t(sh.N + sh.K));
    const k::expert_matrix m = packed_by(be, w, sh.N, sh.K);
    for (const act_quant act : {act_quant::NONE, act_quant::MXFP8_E4M3, act_quant::MXFP8_E5M2}) {
      Vec want(size_t(sh.T * sh.N)), got(want.size(), std::nanf(""));
      ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), sh.T, sh.N, sh.K, act);
      be.matmul_mxfp4(x.data(), m, got.data(), sh.T, act);
      const bool rounds = rounds_x && act == act_quant::NONE;
      moxi::testing::expect_matches_ref(
          got, want, moxi::testing::mxfp4_magnitudes(x, w, sh.T, sh.N, sh.K, act), sh.K, rounds,
          "T=" + std::to_string(sh.T) + " N=" + std::to_string(sh.N) + " K=" + std::to_string(sh.K) +
              " act=" + std::to_string(int(act)),
          seen[rounds]);
    }
  }
  moxi::testing::print_worst(seen, {be.name()});

  // Special scales: a NaN block (NaN output), a zero block with scale 2^-127, huge and tiny scales.
  const int64_t N = 20, K = 128, nb = K / 32;
  for (const int64_t T : {1, 6}) {
    mxw w = moxi::testing::random_mxfp4_weights(N, K, 3);
    w.scales[size_t(2 * nb + 1)] = 0xFF;
    for (int64_t j = 0; j < 16; ++j) w.blocks[size_t((5 * nb + 2) * 16 + j)] = 0;
    w.scales[size_t(5 * nb + 2)] = 0x00;
    for (int64_t b = 0; b < nb; ++b) w.scales[size_t(7 * nb + b)] = uint8_t(127 + 100);
    for (int64_t b = 0; b < nb; ++b) w.scales[size_t(8 * nb + b)] = uint8_t(127 - 100);
    const Vec x = moxi::testing::mxfp4_activations(size_t(T * K), 5);
    Vec want(size_t(T * N)), got(size_t(T * N));
    ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), T, N, K, act_quant::NONE);
    be.matmul_mxfp4(x.data(), packed_by(be, w, N, K), got.data(), T, act_quant::NONE);
    for (int64_t t = 0; t < T; ++t) EXPECT_TRUE(std::isnan(got[size_t(t * N + 2)])) << "T=" << T;
    const auto s = moxi::testing::compare_to_ref(
        got, want, moxi::testing::mxfp4_magnitudes(x, w, T, N, K, act_quant::NONE),
        moxi::testing::allowed_rel(K, rounds_x));
    EXPECT_EQ(s.nan_mismatch, 0) << "T=" << T;
    EXPECT_LE(s.worst_ratio, 1.0) << "T=" << T;
  }

  // Weights without this backend's pack (loaded by the reference) run the reference, bit for bit.
  const int64_t T = 3, Nu = 37, Ku = 192;
  const mxw w = moxi::testing::random_mxfp4_weights(Nu, Ku, 8);
  const Vec x = moxi::testing::mxfp4_activations(size_t(T * Ku), 9);
  k::expert_matrix bare = packed_by(be, w, Nu, Ku);
  bare.packed = nullptr;
  Vec want(size_t(T * Nu)), got(want.size());
  ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), T, Nu, Ku,
                    act_quant::MXFP8_E4M3);
  be.matmul_mxfp4(x.data(), bare, got.data(), T, act_quant::MXFP8_E4M3);
  EXPECT_TRUE(same_bits(want, got)) << "unpacked weights";
}

// ---- MX fake quantization ----

// Random blocks over fp32-subnormal to huge scales, exact ties of the E4M3 / E5M2 grids, signed zeros, an
// all-subnormal block, a NaN block and an Inf block.
Vec mx_test_blocks(uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-140, 120);
  Vec x;
  for (int b = 0; b < 64; ++b) {
    const float s = std::ldexp(1.0f, ex(gen));
    for (int i = 0; i < 32; ++i) x.push_back(nd(gen) * s);
  }
  for (float m : {448.0f, 57344.0f}) {
    Vec b(32);
    b[0] = m;
    for (int i = 1; i < 32; ++i) b[size_t(i)] = m * (float(i) + 0.5f) / 64.0f * (i % 2 ? 1.0f : -1.0f);
    b[31] = std::nextafter(b[30], 0.0f);
    x.insert(x.end(), b.begin(), b.end());
  }
  Vec special(32, 0.0f);
  for (int i = 0; i < 32; i += 2) special[size_t(i)] = -0.0f;
  x.insert(x.end(), special.begin(), special.end());
  special.assign(32, std::numeric_limits<float>::denorm_min());
  special[3] = -std::numeric_limits<float>::denorm_min() * 7;
  x.insert(x.end(), special.begin(), special.end());
  special.assign(32, 1.0f);
  special[5] = std::numeric_limits<float>::quiet_NaN();
  x.insert(x.end(), special.begin(), special.end());
  special[5] = -std::numeric_limits<float>::infinity();
  x.insert(x.end(), special.begin(), special.end());
  return x;
}

void fake_quantize(const k::backend& be) {
  for (const auto f : {mx::elem_format::FP8_E4M3, mx::elem_format::FP8_E5M2})
    for (uint64_t seed : {1u, 2u, 3u}) {
      const Vec x = mx_test_blocks(seed);
      Vec want(x.size()), got(x.size(), 1.0f);
      mx::fake_quantize(f, x.data(), x.size(), want.data());
      be.fake_quantize(f, x.data(), x.size(), got.data());
      EXPECT_TRUE(same_bits(want, got)) << "format " << int(f) << " seed " << seed;
      Vec inplace = x;  // out aliasing x
      be.fake_quantize(f, inplace.data(), inplace.size(), inplace.data());
      EXPECT_TRUE(same_bits(want, inplace)) << "in place, format " << int(f) << " seed " << seed;
    }
}

// ---- elementwise ----

// Arguments across sigmoid's range: both tails (exp overflow and underflow, subnormal results), zeros of
// both signs, infinities, NaN, and n that is not a multiple of the 16 lanes.
Vec elementwise_inputs(uint64_t seed, size_t n) {
  std::mt19937_64 gen(seed);
  Vec x = uniform(gen, n, -30, 30);
  const float special[] = {0.0f,
                           -0.0f,
                           1e-30f,
                           -1e-30f,
                           88.0f,
                           -88.0f,
                           104.0f,
                           -104.0f,
                           200.0f,
                           -200.0f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (size_t i = 0; i < std::size(special) && i < n; ++i) x[i * 7 % n] = special[i];
  return x;
}

// sigmoid, swiglu, mul_sigmoid and the sigmoid-gated RMSNorm: the reference's bits, in place too.
void elementwise(const k::backend& be) {
  for (const int64_t D : {1, 16, 100, 128}) {  // gated_rms_norm over 3 rows of D
    const Vec x = elementwise_inputs(uint64_t(D) + 50, size_t(3 * D)),
              g = elementwise_inputs(uint64_t(D), size_t(3 * D));
    std::mt19937_64 gen{uint64_t(D)};
    Vec xs = uniform(gen, size_t(3 * D), -4, 4);  // finite rows (a NaN or inf row is NaN whatever the order)
    const Vec w = uniform(gen, size_t(D), 0.5f, 1.5f);
    for (const Vec* in : std::vector<const Vec*>{&xs, &x}) {
      Vec want(size_t(3 * D)), got(want.size(), 7.0f);
      ref::gated_rms_norm(in->data(), g.data(), w.data(), want.data(), 3, D, 1e-6f);
      be.gated_rms_norm(in->data(), g.data(), w.data(), got.data(), 3, D, 1e-6f);
      EXPECT_TRUE(same_bits(want, got)) << "gated_rms_norm D=" << D;
    }
  }
  for (const size_t n : {size_t(1), size_t(15), size_t(16), size_t(100), size_t(4099)}) {
    const Vec a = elementwise_inputs(n, n), b = elementwise_inputs(n + 1, n);
    Vec want(n), got(n, 7.0f);
    ref::sigmoid(a.data(), want.data(), int64_t(n));
    be.sigmoid(a.data(), got.data(), int64_t(n));
    EXPECT_TRUE(same_bits(want, got)) << "sigmoid n=" << n;
    ref::swiglu(a.data(), b.data(), want.data(), int64_t(n));
    be.swiglu(a.data(), b.data(), got.data(), int64_t(n));
    EXPECT_TRUE(same_bits(want, got)) << "swiglu n=" << n;
    Vec inplace = a;
    be.swiglu(inplace.data(), b.data(), inplace.data(), int64_t(n));
    EXPECT_TRUE(same_bits(want, inplace)) << "swiglu in place n=" << n;
    ref::mul_sigmoid(a.data(), b.data(), want.data(), int64_t(n));
    be.mul_sigmoid(a.data(), b.data(), got.data(), int64_t(n));
    EXPECT_TRUE(same_bits(want, got)) << "mul_sigmoid n=" << n;
  }
}

// RMSNorm (with and without a weight), L2 norm and LayerNorm: the reference's bits.
void norms(const k::backend& be) {
  for (const int64_t D : {1, 16, 100, 1024}) {
    std::mt19937_64 gen{uint64_t(D) + 7};
    const Vec x = uniform(gen, size_t(3 * D), -4, 4), w = uniform(gen, size_t(D), 0.5f, 1.5f),
              b = uniform(gen, size_t(D), -1, 1);
    Vec want(x.size()), got(x.size(), 7.0f);
    for (const float* wt : {w.data(), static_cast<const float*>(nullptr)}) {
      ref::rms_norm(x.data(), wt, want.data(), 3, D, 1e-5f);
      be.rms_norm(x.data(), wt, got.data(), 3, D, 1e-5f);
      EXPECT_TRUE(same_bits(want, got)) << "rms_norm D=" << D << (wt ? "" : " no weight");
    }
    ref::l2norm(x.data(), want.data(), 3, D);
    be.l2norm(x.data(), got.data(), 3, D);
    EXPECT_TRUE(same_bits(want, got)) << "l2norm D=" << D;
    Vec inplace = x;
    be.l2norm(inplace.data(), inplace.data(), 3, D);
    EXPECT_TRUE(same_bits(want, inplace)) << "l2norm in place D=" << D;
    ref::layer_norm(x.data(), w.data(), b.data(), want.data(), 3, D, 1e-5f);
    be.layer_norm(x.data(), w.data(), b.data(), got.data(), 3, D, 1e-5f);
    EXPECT_TRUE(same_bits(want, got)) << "layer_norm D=" << D;
  }
}

// The KDA short convolution with its SiLU: outputs and the carried state, with and without a state, one
// token (decode) and a chunk, channel counts across the 16 lanes, kernel widths 1 to 4.
void causal_conv1d_silu(const k::backend& be) {
  uint64_t seed = 40;
  for (const int64_t T : {1, 3, 37})
    for (const int64_t C : {5, 16, 50})
      for (const int64_t W : {1, 2, 4})
        for (const bool with_state : {false, true}) {
          std::mt19937_64 gen(seed++);
          const Vec x = uniform(gen, size_t(T * C), -3, 3), w = uniform(gen, size_t(C * W), -1, 1);
          Vec want_state = uniform(gen, size_t((W - 1) * C), -3, 3), got_state = want_state;
          Vec want(size_t(T * C)), got(want.size(), 7.0f);
          ref::causal_conv1d_silu(x.data(), w.data(), with_state ? want_state.data() : nullptr, want.data(),
                                  T, C, W);
          be.causal_conv1d_silu(x.data(), w.data(), with_state ? got_state.data() : nullptr, got.data(), T, C,
                                W);
          EXPECT_TRUE(same_bits(want, got))
              << "T=" << T << " C=" << C << " W=" << W << " state " << with_state;
          EXPECT_TRUE(same_bits(want_state, got_state)) << "state T=" << T << " C=" << C << " W=" << W;
        }
  // The lower-bound decay gate, with and without A_log and dt_bias, K across the lanes.
  for (const int64_t K : {5, 16, 64})
    for (const bool params : {false, true}) {
      std::mt19937_64 gen{uint64_t(K) + params};
      const int64_t T = 3, H = 2;
      const Vec graw = elementwise_inputs(uint64_t(K), size_t(T * H * K)),
                A_log = uniform(gen, size_t(H), -2, 2), bias = uniform(gen, size_t(H * K), -1, 1);
      Vec want(size_t(T * H * K)), got(want.size(), 7.0f);
      ref::kda_gate_lower_bound(graw.data(), params ? A_log.data() : nullptr, params ? bias.data() : nullptr,
                                -5.0f, want.data(), T, H, K);
      be.kda_gate_lower_bound(graw.data(), params ? A_log.data() : nullptr, params ? bias.data() : nullptr,
                              -5.0f, got.data(), T, H, K);
      EXPECT_TRUE(same_bits(want, got)) << "kda_gate_lower_bound K=" << K << " params " << params;
    }
}

// ---- KDA ----

struct kda_shape {
  int64_t T, H, K, V;
};

// q, k L2-normalized, log-space decays from strong (-8) to weak (-1e-3), beta in (0, 1), a random state.
struct kda_data {
  Vec q, k, v, g, beta, h0;
  float scale;
  kda_data(const kda_shape& s, uint64_t seed) {
    std::mt19937_64 gen(seed);
    const size_t nk = size_t(s.T * s.H * s.K), nv = size_t(s.T * s.H * s.V);
    q = uniform(gen, nk, -1, 1);
    k = uniform(gen, nk, -1, 1);
    v = uniform(gen, nv, -1, 1);
    ref::l2norm(q.data(), q.data(), s.T * s.H, s.K);
    ref::l2norm(k.data(), k.data(), s.T * s.H, s.K);
    g = uniform(gen, nk, -8, -1e-3f);
    beta = uniform(gen, size_t(s.T * s.H), 0.01f, 0.99f);
    h0 = uniform(gen, size_t(s.H * s.K * s.V), -1, 1);
    scale = 1.0f / std::sqrt(float(s.K));
  }
};

using kda_fn = void (k::backend::*)(const float*, const float*, const float*, const float*, const float*,
                                    float, float*, float*, int64_t, int64_t, int64_t, int64_t) const;

void kda_compare(const k::backend& be, kda_fn fn, const kda_shape& s, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "T=" << s.T << " H=" << s.H << " K=" << s.K << " V=" << s.V);
  const kda_data d(s, seed);
  Vec want_state = d.h0, got_state = d.h0, want_o(size_t(s.T * s.H * s.V)), got_o(want_o.size());
  (k::reference().*fn)(d.q.data(), d.k.data(), d.v.data(), d.g.data(), d.beta.data(), d.scale,
                       want_state.data(), want_o.data(), s.T, s.H, s.K, s.V);
  (be.*fn)(d.q.data(), d.k.data(), d.v.data(), d.g.data(), d.beta.data(), d.scale, got_state.data(),
           got_o.data(), s.T, s.H, s.K, s.V);
  EXPECT_TRUE(same_bits(want_o, got_o)) << "outputs differ";
  EXPECT_TRUE(same_bits(want_state, got_state)) << "final states differ";
  double mag = 0;
  for (float x : want_o) mag = std::max(mag, double(std::fabs(x)));
  EXPECT_GT(mag, 1e-3);  // the outputs are not trivially zero
}

// V that is and is not a multiple of the 16-lane vector, several tokens and heads.
void kda_recurrent(const k::backend& be) {
  for (const kda_shape s : {kda_shape{1, 1, 16, 16}, kda_shape{3, 4, 128, 128}, kda_shape{2, 3, 20, 37},
                            kda_shape{5, 2, 64, 8}, kda_shape{4, 2, 33, 100}})
    kda_compare(be, &k::backend::kda_recurrent, s, uint64_t(s.T * 1000 + s.K + s.V));
}

// T across the 64-token chunk (1, 5, 64, 65, 130), K and V not multiples of 16.
void kda_chunked(const k::backend& be) {
  for (const kda_shape s : {kda_shape{1, 2, 16, 16}, kda_shape{5, 3, 20, 37}, kda_shape{64, 2, 128, 128},
                            kda_shape{65, 1, 33, 100}, kda_shape{130, 2, 64, 48}})
    kda_compare(be, &k::backend::kda_chunked, s, uint64_t(s.T * 977 + s.K + s.V));
}

// Several sequences (decode steps and prefills) in one call, enough work to split over the pool: equal, bit
// for bit, to the reference's cores run one sequence after the other.
void kda_cores(const k::backend& be) {
  const int64_t H = 6, D = 64;
  const std::vector<int64_t> lengths = {1, 65, 1, 130, 7};
  int64_t R = 0;
  for (int64_t T : lengths) R += T;
  const kda_data d(kda_shape{R, H, D, D}, 11);
  Vec want_states, got_states, want_o(size_t(R * H * D)), got_o(want_o.size());
  std::mt19937_64 gen(12);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const Vec h0 = uniform(gen, size_t(H * D * D), -1, 1);
    want_states.insert(want_states.end(), h0.begin(), h0.end());
  }
  got_states = want_states;
  auto run = [&](const k::backend& b, Vec& states, Vec& o) {
    std::vector<k::kda_seq> seqs;
    int64_t r0 = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      seqs.push_back({r0, lengths[i], states.data() + int64_t(i) * H * D * D});
      r0 += lengths[i];
    }
    b.kda_cores(
        {d.q.data(), d.k.data(), d.v.data(), d.g.data(), d.beta.data(), d.scale, o.data(), H, D, seqs});
  };
  run(k::reference(), want_states, want_o);
  run(be, got_states, got_o);
  EXPECT_TRUE(same_bits(want_o, got_o)) << "outputs differ";
  EXPECT_TRUE(same_bits(want_states, got_states)) << "final states differ";
}

// ---- MLA / DSA ----

struct mla_shape {
  int64_t T, S, H, L, Dr;
};
// Head counts below, at and above the 16-lane vector, latent widths that are not multiples of 16.
constexpr mla_shape kMlaShapes[] = {{1, 1, 1, 16, 0},  {3, 40, 4, 32, 8},  {5, 70, 8, 256, 32},
                                    {2, 9, 20, 40, 8}, {7, 7, 16, 24, 16}, {1, 300, 8, 64, 32}};

void mla_attention(const k::backend& be) {
  for (const mla_shape s : kMlaShapes) {
    SCOPED_TRACE(::testing::Message()
                 << "T=" << s.T << " S=" << s.S << " H=" << s.H << " L=" << s.L << " Dr=" << s.Dr);
    std::mt19937_64 gen(uint64_t(s.S * 31 + s.H));
    const int64_t Wl = s.L + s.Dr;
    const Vec q = normal(gen, size_t(s.T * s.H * Wl)), lat = normal(gen, size_t(s.S * Wl));
    Vec want(size_t(s.T * s.H * s.L)), got(want.size(), -1.0f);
    ref::mla_attention_absorbed(q.data(), lat.data(), want.data(), s.T, s.S, s.H, s.L, s.Dr, 0.17f);
    be.mla_attention_absorbed(q.data(), lat.data(), got.data(), s.T, s.S, s.H, s.L, s.Dr, 0.17f);
    EXPECT_TRUE(same_bits(want, got));
  }
}

// DSA index lists with -1 padding, an all-padding query (0) and repeated rows; the last shape has enough
// queries to be split over the pool.
void mla_sparse(const k::backend& be) {
  std::vector<mla_shape> shapes(std::begin(kMlaShapes), std::end(kMlaShapes));
  shapes.push_back({64, 200, 16, 512, 64});
  for (const mla_shape s : shapes) {
    SCOPED_TRACE(::testing::Message()
                 << "T=" << s.T << " S=" << s.S << " H=" << s.H << " L=" << s.L << " Dr=" << s.Dr);
    std::mt19937_64 gen(uint64_t(s.S * 17 + s.H));
    const int64_t Wl = s.L + s.Dr, topk = s.T > 16 ? 64 : 12;
    const Vec q = normal(gen, size_t(s.T * s.H * Wl)), lat = normal(gen, size_t(s.S * Wl));
    std::vector<int32_t> idx(size_t(s.T * topk));
    for (auto& i : idx) i = gen() % 4 == 0 ? -1 : int32_t(gen() % uint64_t(s.S));
    for (int64_t j = 0; j < topk; ++j) idx[size_t(j)] = -1;
    Vec want(size_t(s.T * s.H * s.L)), got(want.size(), -1.0f);
    ref::mla_attention_absorbed_sparse(q.data(), lat.data(), idx.data(), want.data(), s.T, s.S, s.H, s.L,
                                       s.Dr, topk, 0.09f);
    be.mla_attention_absorbed_sparse(q.data(), lat.data(), idx.data(), got.data(), s.T, s.S, s.H, s.L, s.Dr,
                                     topk, 0.09f);
    EXPECT_TRUE(same_bits(want, got));
  }
}

// W_UK absorption of q and W_UV unabsorption of o, the latter from the backend's layout of W_UV (made at
// load) and without it (weights loaded by the reference: the reference runs).
void mla_absorb(const k::backend& be) {
  struct dims {
    int64_t T, H, Dn, Dr, Dv, L;
  };
  for (const dims s : {dims{1, 4, 16, 8, 16, 32}, dims{3, 8, 64, 32, 64, 256}, dims{2, 3, 10, 0, 20, 40},
                       dims{5, 2, 7, 4, 33, 17}, dims{2, 2, 8, 0, 130, 24}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << s.T << " H=" << s.H << " Dn=" << s.Dn << " Dr=" << s.Dr
                                      << " Dv=" << s.Dv << " L=" << s.L);
    std::mt19937_64 gen(uint64_t(s.L * 13 + s.Dv));
    const Vec q = normal(gen, size_t(s.T * s.H * (s.Dn + s.Dr))),
              w = normal(gen, size_t(s.H * (s.Dn + s.Dv) * s.L));
    Vec want(size_t(s.T * s.H * (s.L + s.Dr))), got(want.size(), -1.0f);
    ref::mla_absorb_q(q.data(), w.data(), want.data(), s.T, s.H, s.Dn, s.Dr, s.Dv, s.L);
    be.mla_absorb_q(q.data(), w.data(), got.data(), s.T, s.H, s.Dn, s.Dr, s.Dv, s.L);
    EXPECT_TRUE(same_bits(want, got)) << "absorb";
    const Vec ol = normal(gen, size_t(s.T * s.H * s.L));
    Vec want_o(size_t(s.T * s.H * s.Dv)), got_o(want_o.size(), -1.0f);
    ref::mla_unabsorb_o(ol.data(), w.data(), want_o.data(), s.T, s.H, s.Dn, s.Dv, s.L);
    be.mla_unabsorb_o(ol.data(), w.data(), {}, got_o.data(), s.T, s.H, s.Dn, s.Dv, s.L);
    EXPECT_TRUE(same_bits(want_o, got_o)) << "unabsorb without the backend's W_UV layout";
    const Vec uv = be.pack_mla_uv(w.data(), s.H, s.Dn, s.Dv, s.L);
    if (k::x86::mxfp4_variant_of(be) != k::x86::mxfp4_variant::REF) {
      // The x86 layout is W_UV transposed per head: checked against that definition.
      ASSERT_EQ(int64_t(uv.size()), s.H * s.L * s.Dv);
      for (int64_t h = 0; h < s.H; ++h)
        for (int64_t j = 0; j < s.Dv; ++j)
          for (int64_t l = 0; l < s.L; ++l)
            ASSERT_EQ(uv[size_t((h * s.L + l) * s.Dv + j)],
                      w[size_t((h * (s.Dn + s.Dv) + s.Dn + j) * s.L + l)]);
    }
    std::fill(got_o.begin(), got_o.end(), -1.0f);
    be.mla_unabsorb_o(ol.data(), w.data(), uv, got_o.data(), s.T, s.H, s.Dn, s.Dv, s.L);
    EXPECT_TRUE(same_bits(want_o, got_o)) << "unabsorb from the backend's W_UV layout";
  }
}

// Key counts below, at and past the 16-lane block, several heads and queries (query-head pairs that do
// not fill the kernel's groups of 8, a query's heads split across two groups, key blocks no query of a
// prompt chunk sees), negative and zero dot products (query 0, head 0 is all zeros), and the -inf of
// non-causal keys. The FP8 key rows: widths the block decoder takes (16-128: one and two 64-byte chunks;
// 20 and 24) and one it leaves to the scalar decoder (18), keys of very different magnitudes (scales 2^-22
// to 2^8), rows whose small values are E4M3 subnormals, signed zeros, and one key with a NaN (its scale NaN:
// NaN scores). Calls of at most 4
// (query, head) pairs take the kernel's two-blocks-at-a-time path: a full, partial or missing second block,
// and queries that see none of a block's keys.
void indexer_scores(const k::backend& be) {
  struct shape {
    int64_t T, S, HI, D;
  };
  for (const shape s :
       {shape{1, 1, 1, 16}, shape{3, 40, 4, 64}, shape{7, 7, 8, 32}, shape{5, 300, 4, 64},
        shape{2, 17, 3, 20}, shape{40, 100, 3, 24}, shape{33, 33, 5, 16}, shape{1, 70, 4, 64},
        shape{2, 48, 2, 128}, shape{3, 37, 2, 18}, shape{1, 57, 4, 32}, shape{3, 45, 1, 16}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << s.T << " S=" << s.S << " HI=" << s.HI << " D=" << s.D);
    std::mt19937_64 gen(uint64_t(s.S * 7 + s.D));
    Vec q = normal(gen, size_t(s.T * s.HI * s.D));
    Vec kf = normal(gen, size_t(s.S * s.D));
    const Vec w = normal(gen, size_t(s.T * s.HI));
    for (int64_t d = 0; d < s.D; ++d) q[size_t(d)] = 0.0f;
    for (int64_t j = 0; j < s.S; ++j)
      for (int64_t d = 0; d < s.D; ++d) {
        float& x = kf[size_t(j * s.D + d)];
        x = j % 11 == 5 ? (d % 2 ? -0.0f : 0.0f) : std::ldexp(x, int(j % 9) * 2 - 8);
        // Rows spanning 2^15 within themselves: their small values get E4M3 subnormal codes.
        if (j % 7 == 3) x = std::ldexp(x, -int(d % 16));
      }
    if (s.S > 20) kf[size_t(19 * s.D + 1)] = std::numeric_limits<float>::quiet_NaN();
    std::vector<uint8_t> kk(size_t(s.S * ref::index_key_bytes(s.D)));
    ref::quantize_index_keys(kf.data(), kk.data(), s.S, s.D);
    int64_t subnormal = 0;  // codes s 0000 mmm, mmm != 0
    for (int64_t j = 0; j < s.S; ++j)
      for (int64_t d = 0; d < s.D; ++d) {
        const uint8_t c = kk[size_t(j * ref::index_key_bytes(s.D) + d)];
        subnormal += (c & 0x78) == 0 && (c & 7) != 0;
      }
    if (s.S > 20) {
      EXPECT_GT(subnormal, 0);
    }
    Vec want(size_t(s.T * s.S)), got(want.size(), 1.0f);
    ref::indexer_scores(q.data(), kk.data(), w.data(), want.data(), s.T, s.S, s.HI, s.D);
    be.indexer_scores(q.data(), kk.data(), w.data(), got.data(), s.T, s.S, s.HI, s.D);
    EXPECT_TRUE(same_bits(want, got));
  }
}

// Top-k of score rows as the reference selects them: prefill rows (T > 1, causal), one long decode row
// (split over the pool), fewer keys than k, many tied scores (ties go to the lower position; +0 and -0 are
// equal), NaN of either sign (below everything) and -inf.
void indexer_topk(const k::backend& be) {
  struct shape {
    int64_t T, S, k;
  };
  for (const shape s : {shape{1, 5000, 64}, shape{7, 300, 16}, shape{5, 5, 8}, shape{1, 40, 64},
                        shape{3, 2000, 256}, shape{1, 70000, 256}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << s.T << " S=" << s.S << " k=" << s.k);
    std::mt19937_64 gen(uint64_t(s.S * 3 + s.k));
    Vec scores = normal(gen, size_t(s.T * s.S));
    for (size_t i = 0; i < scores.size(); ++i) {
      if (i % 3 != 2) scores[i] = std::round(scores[i] * 2) / 2;  // ties, at the k-th score too
      if (i % 97 == 5) scores[i] = std::numeric_limits<float>::quiet_NaN();
      if (i % 89 == 7) scores[i] = -std::numeric_limits<float>::infinity();
      if (i % 13 == 4) scores[i] = i % 2 ? -0.0f : 0.0f;  // equal scores: ordered by position
      if (i % 101 == 9) scores[i] = -std::numeric_limits<float>::quiet_NaN();
    }
    std::vector<int32_t> want(size_t(s.T * s.k)), got(want.size(), 7);
    ref::indexer_topk(scores.data(), want.data(), s.T, s.S, s.k);
    be.indexer_topk(scores.data(), got.data(), s.T, s.S, s.k);
    EXPECT_EQ(want, got);
  }
}

// ---- MoE ----

// The routed experts of a layer (MXFP4 with MXFP8 activations, and f32) split over the pool by the backend:
// equal, bit for bit, to the same backend's expert matmuls run one expert after the other and summed in
// expert order, so the split never changes a result.
void moe_experts(const k::backend& be) {
  const int64_t E = 12, T = 40, W = 256, F = 512, top_k = 3;
  std::vector<mxw> raw;
  raw.reserve(size_t(3 * E));
  std::vector<k::expert_weights> experts(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    k::expert_weights& x = experts[size_t(e)];
    if (e % 4 == 3) {  // f32 experts (a dequantized or float checkpoint)
      std::mt19937_64 gen(static_cast<uint64_t>(e));
      x.gate = {F, W, normal(gen, size_t(F * W)), nullptr, nullptr, nullptr};
      x.up = {F, W, normal(gen, size_t(F * W)), nullptr, nullptr, nullptr};
      x.down = {W, F, normal(gen, size_t(W * F)), nullptr, nullptr, nullptr};
      continue;
    }
    raw.push_back(moxi::testing::random_mxfp4_weights(F, W, uint64_t(3 * e)));
    x.gate = packed_by(be, raw.back(), F, W);
    raw.push_back(moxi::testing::random_mxfp4_weights(F, W, uint64_t(3 * e + 1)));
    x.up = packed_by(be, raw.back(), F, W);
    raw.push_back(moxi::testing::random_mxfp4_weights(W, F, uint64_t(3 * e + 2)));
    x.down = packed_by(be, raw.back(), W, F);
  }
  std::mt19937_64 gen(5);
  const Vec x = normal(gen, size_t(T * W));
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < top_k; ++j) routed[size_t((t * 5 + j * 7) % (E - 1))].push_back({t, 0.25f + j});
  Vec got(size_t(T * W), std::nanf(""));
  be.moe_experts({x.data(), T, W, F, experts, &routed, act_quant::MXFP8_E4M3, got.data()});
  Vec want(size_t(T * W), 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = routed[size_t(e)];
    const int64_t n = int64_t(list.size());
    const k::expert_weights& ex = experts[size_t(e)];
    Vec xin(size_t(n * W)), g(size_t(n * F)), u(size_t(n * F)), y(size_t(n * W));
    for (int64_t i = 0; i < n; ++i) std::copy_n(x.data() + list[size_t(i)].first * W, W, xin.data() + i * W);
    be.matmul_expert(xin.data(), ex.gate, g.data(), n, act_quant::MXFP8_E4M3);
    be.matmul_expert(xin.data(), ex.up, u.data(), n, act_quant::MXFP8_E4M3);
    be.swiglu(g.data(), u.data(), g.data(), n * F);
    be.matmul_expert(g.data(), ex.down, y.data(), n, act_quant::MXFP8_E4M3);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t d = 0; d < W; ++d)
        want[size_t(list[size_t(i)].first * W + d)] += list[size_t(i)].second * y[size_t(i * W + d)];
  }
  EXPECT_TRUE(same_bits(want, got));
}

// ---- the table ----

struct op_case {
  const char* name;
  k::op op;
  k::wformat format;
  void (*run)(const k::backend&);
};

const op_case kCases[] = {
    {"matmul_f32", k::op::matmul, k::wformat::F32, matmul_f32},
    {"matmul_bf16", k::op::matmul, k::wformat::BF16, matmul_bf16},
    {"matmul_bf16_panels", k::op::matmul, k::wformat::BF16, matmul_bf16_panels},
    {"matmul_mxfp4", k::op::matmul_mxfp4, k::wformat::MXFP4, matmul_mxfp4},
    {"fake_quantize", k::op::fake_quantize, k::wformat::F32, fake_quantize},
    {"kda_recurrent", k::op::kda_recurrent, k::wformat::F32, kda_recurrent},
    {"kda_chunked", k::op::kda_chunked, k::wformat::F32, kda_chunked},
    {"kda_cores", k::op::kda_chunked, k::wformat::F32, kda_cores},
    {"norms", k::op::norms, k::wformat::F32, norms},
    {"elementwise", k::op::elementwise, k::wformat::F32, elementwise},
    {"causal_conv1d_silu", k::op::kda_conv, k::wformat::F32, causal_conv1d_silu},
    {"mla_attention", k::op::mla_attention, k::wformat::F32, mla_attention},
    {"mla_sparse", k::op::mla_sparse, k::wformat::F32, mla_sparse},
    {"mla_absorb", k::op::mla_absorb, k::wformat::F32, mla_absorb},
    {"indexer_scores", k::op::indexer_scores, k::wformat::F32, indexer_scores},
    {"indexer_topk", k::op::indexer_topk, k::wformat::F32, indexer_topk},
    {"moe_experts", k::op::moe_experts, k::wformat::MXFP4, moe_experts},
};

std::vector<std::string> fast_backend_names() {
  std::vector<std::string> v;
  for (const k::backend* b : k::backends())
    if (b != &k::reference()) v.push_back(b->name());
  return v;
}

class BackendOps : public ::testing::TestWithParam<std::tuple<std::string, size_t>> {};

TEST_P(BackendOps, MatchesTheReference) {
  const auto& [name, i] = GetParam();
  const op_case& c = kCases[i];
  const k::backend* be = k::find_backend(name);
  ASSERT_NE(be, nullptr);
  if (const char* only = std::getenv("MOXI_TEST_BACKEND"); only && name != only)
    GTEST_SKIP() << name << " not run: MOXI_TEST_BACKEND=" << only;
  if (!be->available())
    GTEST_SKIP() << name << " not run: this CPU lacks it (" << k::x86::cpu_features_string() << ")";
  if (!be->supports(c.op, c.format))
    GTEST_SKIP() << name << " not run for " << c.name << ": it runs the reference's code for this op";
  std::printf("%s on %s\n", c.name, name.c_str());
  c.run(*be);
}

INSTANTIATE_TEST_SUITE_P(Registered, BackendOps,
                         ::testing::Combine(::testing::ValuesIn(fast_backend_names()),
                                            ::testing::Range(size_t(0), sizeof(kCases) / sizeof(kCases[0]))),
                         [](const ::testing::TestParamInfo<BackendOps::ParamType>& p) {
                           return std::string(kCases[std::get<1>(p.param)].name) + "_on_" +
                                  std::get<0>(p.param);
                         });

// ---- the registry, selection and scopes ----

TEST(Backends, ReferenceFirstNamesUniqueAndFindable) {
  const auto all = k::backends();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all[0], &k::reference());
  EXPECT_STREQ(k::reference().name(), "ref");
  EXPECT_TRUE(k::reference().available());
  for (const k::backend* b : all) {
    EXPECT_EQ(k::find_backend(b->name()), b) << b->name();
    for (const k::backend* c : all) {
      if (b != c) {
        EXPECT_STRNE(b->name(), c->name());
      }
    }
  }
  EXPECT_EQ(k::find_backend("no such backend"), nullptr);
  EXPECT_TRUE(k::default_backend().available());
}

// Without MOXI_KERNELS the default is the last available backend.
TEST(Backends, DefaultIsTheLastAvailable) {
  if (std::getenv("MOXI_KERNELS") != nullptr) GTEST_SKIP() << "MOXI_KERNELS is set";
  const k::backend* last = nullptr;
  for (const k::backend* b : k::backends())
    if (b->available()) last = b;
  EXPECT_EQ(&k::default_backend(), last);
}

// The reference backend is the scalar kernels, bit for bit, and a scope makes it active on its thread only.
TEST(Backends, ScopeSelectsTheReferenceOnThisThread) {
  const int64_t T = 9, N = 37, K = 70;
  const Vec x = randn_outliers(size_t(T * K), 7), w = randn_outliers(size_t(N * K), 8);
  Vec want(size_t(T * N)), got(want.size());
  ref::matmul(x.data(), w.data(), nullptr, want.data(), T, N, K);
  k::reference().matmul(x.data(), w.data(), nullptr, got.data(), T, N, K);
  EXPECT_TRUE(same_bits(want, got));
  EXPECT_EQ(&k::active(), &k::default_backend());
  {
    k::backend_scope scope(k::reference());
    EXPECT_EQ(&k::active(), &k::reference());
    const k::backend* other = nullptr;
    std::thread([&] { other = &k::active(); }).join();
    EXPECT_EQ(other, &k::default_backend());
    {
      k::backend_scope inner(k::default_backend());
      EXPECT_EQ(&k::active(), &k::default_backend());
    }
    EXPECT_EQ(&k::active(), &k::reference());
    std::fill(got.begin(), got.end(), 0.0f);
    k::active().matmul(x.data(), w.data(), nullptr, got.data(), T, N, K);
    EXPECT_TRUE(same_bits(want, got));
  }
  EXPECT_EQ(&k::active(), &k::default_backend());
}

// MOXI_KERNELS is read once per process, so each value is checked in a child: ref gives the reference
// (whose MXFP4 matmul is ref::matmul_mxfp4 bit for bit, packed or not); a backend name caps the choice at
// that backend (the best available at or before it: an unsupported request falls back below it).
TEST(Backends, MoxiKernelsChoosesTheDefault) {
  if (const char* env = std::getenv("MOXI_KERNELS")) {
    const std::string cap = env;
    const auto all = k::backends();
    size_t at = all.size();
    for (size_t i = 0; i < all.size(); ++i)
      if (cap == all[i]->name()) at = i;
    ASSERT_LT(at, all.size()) << cap;
    const k::backend* want = &k::reference();
    for (size_t i = 0; i <= at; ++i)
      if (all[i]->available()) want = all[i];
    EXPECT_EQ(&k::default_backend(), want) << cap;
    EXPECT_EQ(&k::active(), want);
    if (cap == "ref") {
      const int64_t T = 9, N = 21, K = 96;
      const mxw w = moxi::testing::random_mxfp4_weights(N, K, 4);
      const Vec x = moxi::testing::mxfp4_activations(size_t(T * K), 6);
      Vec a(size_t(T * N)), b(size_t(T * N));
      ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), a.data(), T, N, K, act_quant::NONE);
      k::active().matmul_mxfp4(x.data(), packed_by(k::active(), w, N, K), b.data(), T, act_quant::NONE);
      EXPECT_TRUE(same_bits(a, b));
      EXPECT_FALSE(k::active().keeps_bf16_weights());
      EXPECT_EQ(k::active().pack_mxfp4(w.blocks.data(), w.scales.data(), N, K), nullptr);
    }
    return;
  }
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(len, 0);
  exe[len] = '\0';
  for (const k::backend* b : k::backends()) {
    const std::string cmd = std::string("MOXI_KERNELS=") + b->name() + " '" + exe +
                            "' --gtest_filter=Backends.MoxiKernelsChoosesTheDefault > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << b->name();
  }
}

}  // namespace
