// Tests of the AMX-BF16 MXFP4 GEMM and of the tile emulator it is tested through (x86/amx-emu.h,
// docs/kernels-mxfp4.md "AMX-BF16 GEMM").
//
// 1. The emulator against the SDM: TDPBF16PS against an fp64 dot product of hand-picked bf16 values
//    (exact where fp32 holds the sums exactly), DAZ on denormal inputs, FTZ on tiny results, the pseudo-
//    code's two fp32 partial sums per column, TILELOADD/TILESTORED shapes, and the #UD/#GP conditions.
// 2. The GEMM body on the emulator (with the scalar decode on any CPU, with the hardware path's AVX-512
//    decode where AVX512-BF16 exists) against ref::matmul_mxfp4 with the bf16 GEMM's tolerance of
//    backend-ops-test.cpp, over N 1..300, K 32..4096 (across the 512 K-chunk), T 1..300 (across the 16-token
//    tiles, the 32-token steps and the 256-token block), all activation modes, special scales; the two
//    decodes bit for bit; and the emulated AMX GEMM against the AVX-512-BF16 GEMM (same bf16 x, same exact
//    weights: only fp32 summation order may differ).
// 3. The same on the hardware tiles where cpu().amx_bf16 (skipped elsewhere); the AVX512-BF16 GEMM forced
//    at every token count and the VBMI GEMV decode (x86 paths the backends' op tests cannot force); the
//    variants' naming, support and MOXI_KERNELS caps.
//
// Tolerance (as backend-ops-test.cpp), per output, mag = sum_k |x_k w_k| in fp64 on the activations the
// kernel sees: x rounded to bf16: |err| <= (2^-8 + 2 (K+2) 2^-24) mag, nRMSE <= 4e-3; exact products (MXFP8
// activations, or two paths on the same bf16 x): |err| <= 2 (K+2) 2^-24 mag.
#include "moxi/base/mx.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/mxfp4-fixture.h"
#include "moxi/base/error.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/ref/basic.h"
#include "moxi/kernels/ref/mxfp4.h"
#include "moxi/kernels/x86/amx-emu.h"
#include "moxi/kernels/x86/backend.h"
#include "moxi/kernels/x86/cpu.h"
#include "moxi/kernels/x86/mxfp4-matmul.h"
#include "moxi/kernels/x86/mxfp4-x86.h"

namespace {

namespace k = moxi::kernels;
namespace x86 = moxi::kernels::x86;
namespace mx = moxi::mx;
using x86::act_quant;
using x86::mxfp4_variant;
using x86::detail::amx_tiles;

// ---- 1. the emulator ----

uint16_t bf16(float f) {  // exact for the hand-picked values below (checked)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  EXPECT_EQ(u & 0xFFFFu, 0u) << f << " is not a bf16 value";
  return uint16_t(u >> 16);
}

double from_bf16(uint16_t v) {
  const uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return double(f);
}

x86::amx_tile_config config(std::initializer_list<std::pair<int, int>> rows_colsb) {
  x86::amx_tile_config c{};
  c.palette_id = 1;
  int t = 0;
  for (const auto& [rows, colsb] : rows_colsb) {
    c.rows[t] = uint8_t(rows);
    c.colsb[t] = uint16_t(colsb);
    ++t;
  }
  return c;
}

float tile_f32(const x86::amx_emu& e, int t, int r, int c) {
  float f;
  std::memcpy(&f, e.tile_bytes(t) + r * 64 + c * 4, 4);
  return f;
}

TEST(AmxEmu, LoadAndStoreMoveOnlyTheConfiguredRowsAndBytes) {
  x86::amx_emu e;
  e.ldtilecfg(config({{3, 12}}));
  std::vector<uint8_t> src(200);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i + 1);
  e.tileloadd(0, src.data(), 50);
  for (int r = 0; r < 16; ++r)
    for (int b = 0; b < 64; ++b)
      EXPECT_EQ(e.tile_bytes(0)[r * 64 + b], r < 3 && b < 12 ? uint8_t(r * 50 + b + 1) : 0) << r << " " << b;
  std::vector<uint8_t> dst(200, 0xEE);
  e.tilestored(0, dst.data(), 40);
  for (int i = 0; i < 200; ++i) {
    const int r = i / 40, b = i % 40;
    EXPECT_EQ(dst[size_t(i)], r < 3 && b < 12 ? uint8_t(r * 50 + b + 1) : 0xEE) << i;
  }
  e.tilezero(0);
  for (int i = 0; i < 1024; ++i) EXPECT_EQ(e.tile_bytes(0)[i], 0);
}

// C[m][n] += sum_k A[m].bf16[2k] B[k].bf16[2n] + A[m].bf16[2k+1] B[k].bf16[2n+1] on small integers and
// halves: every partial sum is exact in fp32, so the SDM's fp32 steps give the fp64 value exactly. Full
// 16 x 16 x 32 tiles and a ragged shape (5 rows, 6 columns, 10 K-pairs), whose C rows and bytes beyond
// the shape must come out zero.
TEST(AmxEmu, TdpBf16PsEqualsAnFp64DotProductOnExactValues) {
  std::mt19937 gen(1);
  std::uniform_int_distribution<int> v(-16, 16);
  for (const auto& [M, Nc, Kp] : {std::tuple{16, 16, 16}, std::tuple{5, 6, 10}}) {
    x86::amx_emu e;
    // tmm0 = C (M x 4Nc bytes), tmm1 = A (M x 4Kp), tmm2 = B (Kp x 4Nc)
    e.ldtilecfg(config({{M, 4 * Nc}, {M, 4 * Kp}, {Kp, 4 * Nc}}));
    std::vector<uint16_t> a(16 * 32), b(16 * 32);
    std::vector<float> c(16 * 16);
    for (auto& x : a) x = bf16(float(v(gen)) * 0.5f);
    for (auto& x : b) x = bf16(float(v(gen)));
    for (auto& x : c) x = float(v(gen) * 100);
    e.tileloadd(1, a.data(), 64);
    e.tileloadd(2, b.data(), 64);
    e.tileloadd(0, c.data(), 64);
    e.tdpbf16ps(0, 1, 2);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        if (m >= M || n >= Nc) {
          EXPECT_EQ(tile_f32(e, 0, m, n), 0.0f) << m << " " << n;
          continue;
        }
        double want = double(c[size_t(m * 16 + n)]);
        for (int kk = 0; kk < Kp; ++kk)
          for (int j = 0; j < 2; ++j)
            want += from_bf16(a[size_t(m * 32 + 2 * kk + j)]) * from_bf16(b[size_t(kk * 32 + 2 * n + j)]);
        EXPECT_EQ(double(tile_f32(e, 0, m, n)), want) << m << " " << n;
      }
  }
}

// SDM: "input denormals are always treated as zero", "output denormals are always flushed to zero".
TEST(AmxEmu, TdpBf16PsReadsDenormalInputsAsZeroAndFlushesTinyResults) {
  x86::amx_emu e;
  e.ldtilecfg(config({{1, 4}, {1, 4}, {1, 4}, {1, 4}}));
  auto run = [&](uint16_t a0, uint16_t a1, uint16_t b0, uint16_t b1, float c0) {
    const uint16_t a[2] = {a0, a1}, b[2] = {b0, b1};
    e.tileloadd(1, a, 4);
    e.tileloadd(2, b, 4);
    e.tileloadd(0, &c0, 4);
    e.tdpbf16ps(0, 1, 2);
    return tile_f32(e, 0, 0, 0);
  };
  const uint16_t one = bf16(1.0f), big = bf16(0x1p127f), denormal = 0x0001;  // 2^-133 as a bf16 denormal
  // fp64 would give 2^-133 * 2^127 = 2^-6; with DAZ the product is zero.
  EXPECT_EQ(from_bf16(denormal) * from_bf16(big), 0x1p-6);
  EXPECT_EQ(run(denormal, 0, big, 0, 0.0f), 0.0f);
  EXPECT_EQ(run(big, 0, denormal, 0, 0.0f), 0.0f);
  EXPECT_EQ(run(denormal, one, big, one, 0.0f), 1.0f);
  // A denormal fp32 accumulator reads as zero too.
  float cden;
  const uint32_t cbits = 1;
  std::memcpy(&cden, &cbits, 4);
  EXPECT_EQ(run(0, 0, 0, 0, cden), 0.0f);
  // 2^-70 * 2^-70 = 2^-140: an fp32 denormal, flushed to zero; 2^-60 * 2^-60 = 2^-120 stays.
  EXPECT_EQ(double(0x1p-70f) * double(0x1p-70f), 0x1p-140);
  EXPECT_EQ(run(bf16(0x1p-70f), 0, bf16(-0x1p-70f), 0, 0.0f), 0.0f);
  EXPECT_EQ(run(bf16(0x1p-60f), 0, bf16(0x1p-60f), 0, 0.0f), 0x1p-120f);
  // NaN and infinities propagate as in IEEE arithmetic.
  EXPECT_TRUE(std::isnan(run(bf16(1.0f), 0, 0x7FC0, 0, 0.0f)));
  EXPECT_TRUE(std::isnan(run(big, big, big, bf16(-0x1p127f), 0.0f)));  // +inf + -inf in the final add
}

// The pseudo-code keeps two fp32 partial sums per column (even and odd bf16 of the pair), each one FMA
// per K-pair, adds them at the end of the instruction and then adds that to C. Even lane: 2^24 then fifteen
// + 1, each a tie that rounds back to 2^24; odd lane: sixteen + 1 = 16. So C = 2^24 + 16, where the exact
// sum 2^24 + 31 would round to 2^24 + 32. Silicon may round elsewhere (its order and internal precision
// are not architectural); the GEMM tests compare the hardware by tolerance, never bit for bit.
TEST(AmxEmu, TdpBf16PsKeepsThePseudoCodesTwoFp32PartialSumsPerColumn) {
  x86::amx_emu e;
  e.ldtilecfg(config({{1, 4}, {1, 64}, {16, 4}}));
  std::vector<uint16_t> a(32, bf16(1.0f)), b(16 * 2);
  for (int kk = 0; kk < 16; ++kk) {
    b[size_t(kk * 2)] = bf16(kk == 0 ? 0x1p24f : 1.0f);
    b[size_t(kk * 2 + 1)] = bf16(1.0f);
  }
  e.tileloadd(1, a.data(), 64);
  e.tileloadd(2, b.data(), 4);
  e.tilezero(0);
  e.tdpbf16ps(0, 1, 2);
  EXPECT_EQ(tile_f32(e, 0, 0, 0), 0x1p24f + 16.0f);
}

TEST(AmxEmu, FaultsWhereTheHardwareWould) {
  using moxi::error;
  x86::amx_emu e;
  EXPECT_THROW(e.tdpbf16ps(0, 1, 2), error);  // unconfigured
  EXPECT_THROW(e.tilezero(0), error);
  auto bad = config({{16, 64}});
  bad.palette_id = 2;
  EXPECT_THROW(e.ldtilecfg(bad), error);
  bad = config({{17, 64}});
  EXPECT_THROW(e.ldtilecfg(bad), error);
  bad = config({{16, 66}});
  EXPECT_THROW(e.ldtilecfg(bad), error);
  bad = config({{16, 64}});
  bad.rows[8] = 1;
  bad.colsb[8] = 4;
  EXPECT_THROW(e.ldtilecfg(bad), error);
  bad = config({{16, 64}});
  bad.reserved[3] = 1;
  EXPECT_THROW(e.ldtilecfg(bad), error);
  EXPECT_FALSE(e.configured());
  // C 16 x 64, A 16 x 64, B 16 x 64, C' 8 x 64, B' 8 x 64, B'' 16 x 32, X 16 x 6
  e.ldtilecfg(config({{16, 64}, {16, 64}, {16, 64}, {8, 64}, {8, 64}, {16, 32}, {16, 8}}));
  EXPECT_NO_THROW(e.tdpbf16ps(0, 1, 2));
  EXPECT_THROW(e.tdpbf16ps(0, 0, 2), error);  // C == A
  EXPECT_THROW(e.tdpbf16ps(0, 1, 1), error);  // A == B
  EXPECT_THROW(e.tdpbf16ps(3, 1, 2), error);  // C.rows != A.rows
  EXPECT_THROW(e.tdpbf16ps(0, 1, 4), error);  // A.colsb / 4 != B.rows
  EXPECT_THROW(e.tdpbf16ps(0, 1, 5), error);  // C.colsb != B.colsb
  EXPECT_THROW(e.tdpbf16ps(0, 1, 7), error);  // tmm7 not configured
  EXPECT_THROW(e.tileloadd(7, nullptr, 0), error);
  e.ldtilecfg(config({{16, 64}, {16, 6}, {1, 64}}));
  EXPECT_THROW(e.tdpbf16ps(0, 1, 2), error);  // A.colsb not a multiple of 4
  e.tilerelease();
  EXPECT_FALSE(e.configured());
  EXPECT_THROW(e.tileloadd(0, nullptr, 0), error);
}

// ---- 2. the GEMM ----

using weights = moxi::testing::mxfp4_weights;
using stats = moxi::testing::mxfp4_error_stats;
using moxi::testing::allowed_rel;
using moxi::testing::compare_to_ref;
using moxi::testing::expect_matches_ref;
using moxi::testing::order_bound;
using moxi::testing::print_worst;
constexpr auto& random_weights = moxi::testing::random_mxfp4_weights;
constexpr auto& activations = moxi::testing::mxfp4_activations;
constexpr auto& magnitudes = moxi::testing::mxfp4_magnitudes;

struct tiles_case {
  amx_tiles tiles;
  const char* name;
};

// The emulated paths this CPU can run (the scalar one always), plus the hardware where it exists.
std::vector<tiles_case> available_tiles(bool with_hardware) {
  std::vector<tiles_case> v{{amx_tiles::EMULATED_SCALAR, "emulated, scalar decode"}};
  if (x86::mxfp4_supported(mxfp4_variant::AVX512_BF16))
    v.push_back({amx_tiles::EMULATED, "emulated, avx512 decode"});
  if (with_hardware && x86::mxfp4_supported(mxfp4_variant::AMX_BF16))
    v.push_back({amx_tiles::HARDWARE, "hardware"});
  return v;
}

struct shape {
  int64_t T, N, K;
};

// N 1..300 (mostly not multiples of 16, odd panel counts), K 32..4096 (inside, at and across the 512
// K-chunk), T 1..300 (1 and 2 A tiles per step, ragged last tiles, the 256-token block crossed by T = 300).
constexpr shape kShapes[] = {{1, 1, 32},    {1, 17, 64},    {2, 16, 96},    {3, 33, 160},   {5, 40, 64},
                             {7, 15, 2080}, {13, 50, 128},  {16, 257, 512}, {17, 31, 544},  {25, 33, 1088},
                             {31, 100, 96}, {33, 47, 1056}, {64, 64, 2048}, {1, 300, 4096}, {200, 40, 320},
                             {64, 17, 32},  {9, 1, 1024},   {2, 129, 3072}, {300, 20, 64}};

void gemm_matches_ref(bool hardware) {
  const auto cases = available_tiles(hardware);
  std::vector<stats> seen(cases.size() * 2);
  for (const shape sh : kShapes) {
    const weights w = random_weights(sh.N, sh.K, uint64_t(sh.T * 1000 + sh.N * 7 + sh.K));
    const std::vector<float> x = activations(size_t(sh.T * sh.K), uint64_t(sh.N + sh.K));
    for (const act_quant act : {act_quant::NONE, act_quant::MXFP8_E4M3, act_quant::MXFP8_E5M2}) {
      std::vector<float> want(size_t(sh.T * sh.N));
      k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), sh.T, sh.N, sh.K, act);
      const std::vector<double> mag = magnitudes(x, w, sh.T, sh.N, sh.K, act);
      for (const tiles_case& c : cases) {
        if (hardware != (c.tiles == amx_tiles::HARDWARE)) continue;
        std::vector<float> got(size_t(sh.T * sh.N), std::nanf(""));
        x86::detail::matmul_mxfp4_amx(x.data(), w.blocks.data(), w.scales.data(), got.data(), sh.T, sh.N,
                                      sh.K, act, c.tiles);
        const bool rounds = act == act_quant::NONE;
        expect_matches_ref(got, want, mag, sh.K, rounds,
                           std::string(c.name) + " T=" + std::to_string(sh.T) + " N=" + std::to_string(sh.N) +
                               " K=" + std::to_string(sh.K) + " act=" + std::to_string(int(act)),
                           seen[size_t(&c - cases.data()) * 2 + rounds]);
      }
    }
  }
  std::vector<std::string> names;
  for (const tiles_case& c : cases) names.push_back(c.name);
  print_worst(seen, names);
}

TEST(Mxfp4Amx, EmulatedGemmMatchesRefOverManyShapes) {
  gemm_matches_ref(false);
}

TEST(Mxfp4Amx, HardwareGemmMatchesRefOverManyShapes) {
  if (!x86::mxfp4_supported(mxfp4_variant::AMX_BF16))
    GTEST_SKIP() << "no AMX-BF16 on this CPU (" << x86::cpu_features_string()
                 << "): the hardware tiles are compiled but not run; the emulated tests cover the kernel";
  gemm_matches_ref(true);
}

TEST(Mxfp4Amx, SpecialScalesNanZeroAndExtremesMatchRef) {
  const int64_t N = 20, K = 128, nb = K / 32;
  for (const int64_t T : {1, 6, 40}) {
    weights w = random_weights(N, K, 3);
    w.scales[size_t(2 * nb + 1)] = 0xFF;   // row 2: NaN block -> NaN output
    w.scales[size_t(17 * nb + 3)] = 0xFF;  // row 17 (second panel): NaN block
    for (int64_t j = 0; j < 16; ++j) w.blocks[size_t((5 * nb + 2) * 16 + j)] = 0;  // row 5: zero block ...
    w.scales[size_t(5 * nb + 2)] = 0x00;                                           // ... with scale 2^-127
    for (int64_t b = 0; b < nb; ++b) w.scales[size_t(7 * nb + b)] = uint8_t(127 + 100);  // row 7: huge scales
    for (int64_t b = 0; b < nb; ++b) w.scales[size_t(8 * nb + b)] = uint8_t(127 - 100);  // row 8: tiny scales
    const std::vector<float> x = activations(size_t(T * K), 5);
    std::vector<float> want(size_t(T * N));
    k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), T, N, K, act_quant::NONE);
    const std::vector<double> mag = magnitudes(x, w, T, N, K, act_quant::NONE);
    for (const tiles_case& c : available_tiles(true)) {
      std::vector<float> got(size_t(T * N));
      x86::detail::matmul_mxfp4_amx(x.data(), w.blocks.data(), w.scales.data(), got.data(), T, N, K,
                                    act_quant::NONE, c.tiles);
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_TRUE(std::isnan(got[size_t(t * N + 2)])) << c.name;
        EXPECT_TRUE(std::isnan(got[size_t(t * N + 17)])) << c.name;
      }
      const stats s = compare_to_ref(got, want, mag, 0x1p-8 + order_bound(K));
      EXPECT_EQ(s.nan_mismatch, 0) << c.name << " T=" << T;
      EXPECT_LE(s.worst_ratio, 1.0) << c.name << " T=" << T;
    }
  }
}

// The hardware path's AVX-512 decode and bf16 conversion against their scalar twins: same tiles, same
// order, so the whole GEMM must agree bit for bit (NaN rows included).
TEST(Mxfp4Amx, Avx512AndScalarDecodeGiveBitIdenticalResults) {
  if (!x86::mxfp4_supported(mxfp4_variant::AVX512_BF16)) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  for (const shape sh : {shape{3, 33, 160}, shape{40, 47, 1056}, shape{17, 300, 64}}) {
    weights w = random_weights(sh.N, sh.K, uint64_t(sh.N + sh.K));
    w.scales[1] = 255;
    w.scales[3] = 0;
    w.scales[4] = 1;
    w.scales[5] = 254;
    std::vector<float> x = activations(size_t(sh.T * sh.K), 7);
    x[0] = 1e-40f;  // fp32 denormal: both conversions give a signed zero
    x[1] = -1e-39f;
    x[2] = std::nanf("");
    x[3] = 1.0f + 0x1p-8f;  // a tie, rounded to even
    for (const act_quant act : {act_quant::NONE, act_quant::MXFP8_E4M3}) {
      std::vector<float> a(size_t(sh.T * sh.N)), b(size_t(sh.T * sh.N));
      x86::detail::matmul_mxfp4_amx(x.data(), w.blocks.data(), w.scales.data(), a.data(), sh.T, sh.N, sh.K,
                                    act, amx_tiles::EMULATED);
      x86::detail::matmul_mxfp4_amx(x.data(), w.blocks.data(), w.scales.data(), b.data(), sh.T, sh.N, sh.K,
                                    act, amx_tiles::EMULATED_SCALAR);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "T=" << sh.T << " N=" << sh.N << " K=" << sh.K;
    }
  }
  // The conversions alone, on the special values.
  std::vector<float> v = activations(4096, 11);
  const float specials[] = {1e-40f,          -1e-39f,        0.0f,
                            -0.0f,           INFINITY,       -INFINITY,
                            std::nanf(""),   1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                            0x1.fffffep127f, 0x1p-126f};
  std::copy(std::begin(specials), std::end(specials), v.begin());
  std::vector<uint16_t> p(v.size()), q(v.size());
  x86::f32_to_bf16_avx512bf16(v.data(), p.data(), int64_t(v.size()));
  x86::f32_to_bf16_scalar(v.data(), q.data(), int64_t(v.size()));
  EXPECT_EQ(p, q);
}

// Emulated AMX against the AVX-512-BF16 GEMM: both round x to bf16 the same way and use exact weights and
// exact products, so they may differ only by fp32 summation order.
TEST(Mxfp4Amx, EmulatedGemmAgreesWithTheAvx512Bf16GemmToSummationOrder) {
  if (!x86::mxfp4_supported(mxfp4_variant::AVX512_BF16)) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  x86::mxfp4_options gemm;
  gemm.gemv_max_tokens = 0;
  for (const shape sh : {shape{5, 40, 64}, shape{33, 47, 1056}, shape{64, 64, 2048}, shape{200, 40, 320},
                         shape{2, 129, 3072}}) {
    const weights w = random_weights(sh.N, sh.K, uint64_t(sh.T + sh.N + sh.K));
    const std::vector<float> x = activations(size_t(sh.T * sh.K), uint64_t(sh.K));
    for (const act_quant act : {act_quant::NONE, act_quant::MXFP8_E5M2}) {
      const x86::packed_mxfp4 pw =
          x86::pack_mxfp4(w.blocks.data(), w.scales.data(), sh.N, sh.K, mxfp4_variant::AVX512_BF16);
      std::vector<float> want(size_t(sh.T * sh.N)), got(size_t(sh.T * sh.N));
      x86::matmul_mxfp4(x.data(), pw, want.data(), sh.T, act, gemm);
      x86::detail::matmul_mxfp4_amx(x.data(), w.blocks.data(), w.scales.data(), got.data(), sh.T, sh.N, sh.K,
                                    act, amx_tiles::EMULATED_SCALAR);
      const std::vector<double> mag = magnitudes(x, w, sh.T, sh.N, sh.K, act);
      const stats s = compare_to_ref(got, want, mag, order_bound(sh.K) * (1.0 + 0x1p-7));
      EXPECT_EQ(s.nan_mismatch, 0);
      EXPECT_LE(s.worst_ratio, 1.0) << "T=" << sh.T << " N=" << sh.N << " K=" << sh.K << " act=" << int(act);
    }
  }
}

// On AMX hardware: the hardware tiles against the emulator (same bf16 x, same weights; the SDM order vs
// the silicon's may differ in rounding only), and the dispatcher's public path (GEMM above the GEMV
// threshold, the AVX512-BF16 GEMV at or below it, bit-identical to that variant's).
TEST(Mxfp4Amx, HardwareAgreesWithTheEmulatorAndTheDispatcherUsesIt) {
  if (!x86::mxfp4_supported(mxfp4_variant::AMX_BF16)) {
    EXPECT_THROW(x86::detail::matmul_mxfp4_amx(nullptr, nullptr, nullptr, nullptr, 1, 1, 32, act_quant::NONE,
                                               amx_tiles::HARDWARE),
                 moxi::error);
    GTEST_SKIP() << "no AMX-BF16 on this CPU (" << x86::cpu_features_string() << ")";
  }
  EXPECT_EQ(x86::mxfp4_variant_of(k::default_backend()), mxfp4_variant::AMX_BF16);
  for (const shape sh : {shape{3, 33, 160}, shape{33, 47, 1056}, shape{200, 300, 4096}}) {
    const weights w = random_weights(sh.N, sh.K, uint64_t(sh.T + sh.N));
    const std::vector<float> x = activations(size_t(sh.T * sh.K), uint64_t(sh.K));
    std::vector<float> hw(size_t(sh.T * sh.N)), emu(size_t(sh.T * sh.N)), pub(size_t(sh.T * sh.N));
    x86::detail::matmul_mxfp4_amx(x.data(), w.blocks.data(), w.scales.data(), hw.data(), sh.T, sh.N, sh.K,
                                  act_quant::NONE, amx_tiles::HARDWARE);
    x86::detail::matmul_mxfp4_amx(x.data(), w.blocks.data(), w.scales.data(), emu.data(), sh.T, sh.N, sh.K,
                                  act_quant::NONE, amx_tiles::EMULATED);
    const stats s = compare_to_ref(hw, emu, magnitudes(x, w, sh.T, sh.N, sh.K, act_quant::NONE),
                                   order_bound(sh.K) * (1.0 + 0x1p-7));
    EXPECT_EQ(s.nan_mismatch, 0);
    EXPECT_LE(s.worst_ratio, 1.0) << "T=" << sh.T << " N=" << sh.N << " K=" << sh.K;
    const x86::packed_mxfp4 pw =
        x86::pack_mxfp4(w.blocks.data(), w.scales.data(), sh.N, sh.K, mxfp4_variant::AMX_BF16);
    EXPECT_EQ(pw.variant(), mxfp4_variant::AMX_BF16);
    x86::mxfp4_options gemm;
    gemm.gemv_max_tokens = 0;
    x86::matmul_mxfp4(x.data(), pw, pub.data(), sh.T, act_quant::NONE, gemm);
    EXPECT_EQ(pub, hw);
    // T <= 4 takes the AVX512-BF16 GEMV on AMX weights too.
    const int64_t t = std::min<int64_t>(sh.T, 4);
    std::vector<float> g1(size_t(t * sh.N)), g2(size_t(t * sh.N));
    x86::matmul_mxfp4(x.data(), pw, g1.data(), t, act_quant::NONE);
    x86::matmul_mxfp4(
        x.data(), x86::pack_mxfp4(w.blocks.data(), w.scales.data(), sh.N, sh.K, mxfp4_variant::AVX512_BF16),
        g2.data(), t, act_quant::NONE);
    EXPECT_EQ(g1, g2);
  }
}

// The AVX512-BF16 GEMM forced for every T (the backends take it only above gemv_max_tokens) against
// ref::matmul_mxfp4 with the bf16 bound, over the shapes above, all activation modes and special scales
// (a NaN block, a zero block with scale 2^-127, huge and tiny scales).
TEST(Mxfp4Amx, Avx512Bf16GemmMatchesRefAtEveryTokenCount) {
  if (!x86::mxfp4_supported(mxfp4_variant::AVX512_BF16)) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  x86::mxfp4_options gemm;
  gemm.gemv_max_tokens = 0;
  std::vector<stats> seen(2);
  for (const shape sh : kShapes) {
    const weights w = random_weights(sh.N, sh.K, uint64_t(sh.T * 1000 + sh.N * 7 + sh.K));
    const std::vector<float> x = activations(size_t(sh.T * sh.K), uint64_t(sh.N + sh.K));
    const x86::packed_mxfp4 pw =
        x86::pack_mxfp4(w.blocks.data(), w.scales.data(), sh.N, sh.K, mxfp4_variant::AVX512_BF16);
    for (const act_quant act : {act_quant::NONE, act_quant::MXFP8_E4M3, act_quant::MXFP8_E5M2}) {
      std::vector<float> want(size_t(sh.T * sh.N)), got(size_t(sh.T * sh.N), std::nanf(""));
      k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), sh.T, sh.N, sh.K, act);
      x86::matmul_mxfp4(x.data(), pw, got.data(), sh.T, act, gemm);
      const bool rounds = act == act_quant::NONE;
      expect_matches_ref(got, want, magnitudes(x, w, sh.T, sh.N, sh.K, act), sh.K, rounds,
                         "T=" + std::to_string(sh.T) + " N=" + std::to_string(sh.N) +
                             " K=" + std::to_string(sh.K) + " act=" + std::to_string(int(act)),
                         seen[rounds]);
    }
  }
  print_worst(seen, {"avx512_bf16-gemm"});
  const int64_t N = 20, K = 128, nb = K / 32;
  for (const int64_t T : {1, 6}) {
    weights w = random_weights(N, K, 3);
    w.scales[size_t(2 * nb + 1)] = 0xFF;
    for (int64_t j = 0; j < 16; ++j) w.blocks[size_t((5 * nb + 2) * 16 + j)] = 0;
    w.scales[size_t(5 * nb + 2)] = 0x00;
    for (int64_t b = 0; b < nb; ++b) w.scales[size_t(7 * nb + b)] = uint8_t(127 + 100);
    for (int64_t b = 0; b < nb; ++b) w.scales[size_t(8 * nb + b)] = uint8_t(127 - 100);
    const std::vector<float> x = activations(size_t(T * K), 5);
    std::vector<float> want(size_t(T * N)), got(size_t(T * N));
    k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), T, N, K, act_quant::NONE);
    x86::matmul_mxfp4(x.data(),
                      x86::pack_mxfp4(w.blocks.data(), w.scales.data(), N, K, mxfp4_variant::AVX512_BF16),
                      got.data(), T, act_quant::NONE, gemm);
    for (int64_t t = 0; t < T; ++t) EXPECT_TRUE(std::isnan(got[size_t(t * N + 2)]));
    const stats s =
        compare_to_ref(got, want, magnitudes(x, w, T, N, K, act_quant::NONE), allowed_rel(K, true));
    EXPECT_EQ(s.nan_mismatch, 0) << "T=" << T;
    EXPECT_LE(s.worst_ratio, 1.0) << "T=" << T;
  }
}

// ---- dense BF16 panels on AMX tiles ----

uint16_t trunc_bf16(float f) {  // the upper half of f's bits
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

// The three bf16 terms sum back to x exactly (in fp64) for |x| from 2^-100 (below, the last term would be
// an fp32 subnormal, which the conversion flushes: an absolute error under 2^-126) to the top of the fp32
// range, and the AVX-512 split equals the scalar one bit for bit.
TEST(DenseAmx, TheThreeBf16TermsSumToXExactly) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-100, 120), sign(0, 1);  // lo2 stays a normal number
  const int64_t n = 4096;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = std::ldexp(mant(rng), ex(rng)) * (sign(rng) ? -1.0f : 1.0f);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1.0f + std::ldexp(1.0f, -23);  // the last mantissa bit only reaches lo2
  x[3] = std::nextafter(2.0f, 0.0f);    // rounds up to 2 in hi
  std::vector<uint16_t> h(static_cast<size_t>(n)), l(static_cast<size_t>(n)), l2(static_cast<size_t>(n));
  x86::split_bf16x3_scalar(x.data(), n, h.data(), l.data(), l2.data());
  for (int64_t i = 0; i < n; ++i) {
    const double sum = from_bf16(h[size_t(i)]) + from_bf16(l[size_t(i)]) + from_bf16(l2[size_t(i)]);
    ASSERT_EQ(sum, double(x[size_t(i)])) << "i=" << i << " x=" << x[size_t(i)];
  }
  if (!x86::mxfp4_supported(mxfp4_variant::AVX512_BF16))
    GTEST_SKIP() << "no AVX512-BF16 for the vector split";
  std::vector<uint16_t> h2(static_cast<size_t>(n)), lv(static_cast<size_t>(n)), l2v(static_cast<size_t>(n));
  x86::split_bf16x3_avx512bf16(x.data(), n, h2.data(), lv.data(), l2v.data());
  EXPECT_EQ(h, h2);
  EXPECT_EQ(l, lv);
  EXPECT_EQ(l2, l2v);
}

// y = x . W^T (+ bias) on the tiles against an fp64 dot product of the same fp32 x and bf16 weights: every
// output within fp32 summation-order error of the exact value (3K + 2 rounded additions at most), which a
// BF16-rounded x (error ~2^-9 of each product) would miss by orders of magnitude.
void dense_amx_matches_fp64(amx_tiles tiles) {
  const struct {
    int64_t T, N, K;
  } shapes[] = {{1, 16, 32}, {16, 32, 64}, {17, 33, 96}, {40, 50, 544}, {129, 100, 1024}, {300, 17, 32}};
  uint64_t seed = 11;
  for (const auto& s : shapes)
    for (bool with_bias : {false, true}) {
      std::mt19937 rng(uint32_t(seed++));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> x(static_cast<size_t>(s.T * s.K)), bias(static_cast<size_t>(s.N));
      std::vector<uint16_t> w(static_cast<size_t>(s.N * s.K));
      for (auto& v : x) v = nd(rng) * (rng() % 50 == 0 ? 100.0f : 1.0f);
      for (auto& v : bias) v = nd(rng);
      for (auto& b : w) b = trunc_bf16(nd(rng));
      std::vector<uint16_t> wp(static_cast<size_t>(k::ref::bf16_panels_size(s.N, s.K)));
      k::ref::pack_bf16_panels(w.data(), s.N, s.K, wp.data());
      std::vector<float> y(size_t(s.T * s.N), -1.0f);
      x86::detail::matmul_bf16_panels_amx(x.data(), wp.data(), with_bias ? bias.data() : nullptr, y.data(),
                                          s.T, s.N, s.K, tiles);
      const double eps = 2.0 * double(3 * s.K + 2) * std::ldexp(1.0, -24);
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t n = 0; n < s.N; ++n) {
          double exact = with_bias ? bias[size_t(n)] : 0.0, mag = std::fabs(exact);
          for (int64_t kk = 0; kk < s.K; ++kk) {
            const double p = double(x[size_t(t * s.K + kk)]) * from_bf16(w[size_t(n * s.K + kk)]);
            exact += p;
            mag += std::fabs(p);
          }
          ASSERT_LE(std::fabs(y[size_t(t * s.N + n)] - exact), eps * mag + 1e-30)
              << "T=" << s.T << " N=" << s.N << " K=" << s.K << " t=" << t << " n=" << n;
        }
    }
}

TEST(DenseAmx, EmulatedTilesMatchAnFp64DotProduct) {
  dense_amx_matches_fp64(amx_tiles::EMULATED_SCALAR);
}

TEST(DenseAmx, HardwareTilesMatchAnFp64DotProductAndTheBackendUsesThem) {
  if (!x86::mxfp4_supported(mxfp4_variant::AMX_BF16)) GTEST_SKIP() << "no AMX-BF16 on this CPU";
  dense_amx_matches_fp64(amx_tiles::HARDWARE);
  // The AMX backend takes the tiles from its threshold on: its product is the hook's, bit for bit.
  const k::backend* amx = k::find_backend("amx_bf16");
  ASSERT_NE(amx, nullptr);
  const int64_t T = x86::dense_tile_min_tokens(*amx), N = 40, K = 256;
  std::vector<float> x(static_cast<size_t>(T * K)), a(static_cast<size_t>(T * N)), b(static_cast<size_t>(T * N));
  std::vector<uint16_t> w(static_cast<size_t>(N * K)), wp(static_cast<size_t>(k::ref::bf16_panels_size(N, K)));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.37f);
  for (size_t i = 0; i < w.size(); ++i) w[i] = trunc_bf16(std::cos(float(i) * 0.11f));
  k::ref::pack_bf16_panels(w.data(), N, K, wp.data());
  amx->matmul_bf16_panels(x.data(), wp.data(), nullptr, a.data(), T, N, K);
  x86::detail::matmul_bf16_panels_amx(x.data(), wp.data(), nullptr, b.data(), T, N, K, amx_tiles::HARDWARE);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

// ---- 3. dispatch ----

TEST(Mxfp4Amx, VariantNameSupportAndDefault) {
  EXPECT_STREQ(x86::to_string(mxfp4_variant::AMX_BF16), "amx_bf16");
  const auto& f = x86::cpu();
  EXPECT_EQ(x86::mxfp4_supported(mxfp4_variant::AMX_BF16), f.avx512 && f.avx512_bf16 && f.amx_bf16);
  if (std::getenv("MOXI_KERNELS") == nullptr) {
    const mxfp4_variant best = x86::mxfp4_variant_of(k::default_backend());
    EXPECT_EQ(best == mxfp4_variant::AMX_BF16, x86::mxfp4_supported(mxfp4_variant::AMX_BF16));
  }
  if (!x86::mxfp4_supported(mxfp4_variant::AMX_BF16)) {
    const weights w = random_weights(16, 32, 1);
    EXPECT_THROW(x86::pack_mxfp4(w.blocks.data(), w.scales.data(), 16, 32, mxfp4_variant::AMX_BF16),
                 moxi::error);
  }
}

// MOXI_KERNELS caps the variant, chosen once per process: each cap is checked in a child process.
TEST(Mxfp4Amx, MoxiKernelsCapsTheVariant) {
  if (const char* env = std::getenv("MOXI_KERNELS")) {
    const std::string cap = env;
    const mxfp4_variant best = x86::mxfp4_variant_of(k::default_backend());
    if (cap == "ref") {
      EXPECT_EQ(best, mxfp4_variant::REF);
    }
    if (cap == "avx512_bf16") {
      EXPECT_NE(best, mxfp4_variant::AMX_BF16);
      if (x86::mxfp4_supported(mxfp4_variant::AVX512_BF16)) {
        EXPECT_EQ(best, mxfp4_variant::AVX512_BF16);
      }
    }
    if (cap == "amx_bf16") {
      const mxfp4_variant want = x86::mxfp4_supported(mxfp4_variant::AMX_BF16) ? mxfp4_variant::AMX_BF16
                                 : x86::mxfp4_supported(mxfp4_variant::AVX512_BF16)
                                     ? mxfp4_variant::AVX512_BF16
                                 : x86::mxfp4_supported(mxfp4_variant::AVX512) ? mxfp4_variant::AVX512
                                                                               : mxfp4_variant::REF;
      EXPECT_EQ(best, want);
    }
    return;
  }
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(len, 0);
  exe[len] = '\0';
  for (const char* cap : {"ref", "avx512_bf16", "amx_bf16"}) {
    const std::string cmd = std::string("MOXI_KERNELS=") + cap + " '" + exe +
                            "' --gtest_filter=Mxfp4Amx.MoxiKernelsCapsTheVariant > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cap;
  }
}

}  // namespace
