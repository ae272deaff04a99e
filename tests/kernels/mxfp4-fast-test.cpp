// Ops tests of the fast MXFP4 kernels: every variant this CPU supports (GEMV and GEMM paths forced
// separately) against ref::matmul_mxfp4 over many shapes (odd N, K across the GEMM's K-chunk, T = 1..200
// across the token tiles), all activation modes, special scales; and the MOXI_KERNELS=ref switch.
//
// Tolerances (per output, relative to mag = sum_k |x_k w_k| in fp64, which bounds every rounding error):
//   exact-product paths (AVX512 GEMV; BF16 GEMV/GEMM with MXFP8 activations, which bf16 holds exactly): both
//     sides are fp32 sums of the same exact products in different orders: |err| <= 2 (K+2) 2^-24 mag.
//   BF16 GEMV/GEMM with fp32 activations: x is rounded to bf16 (relative error <= 2^-8 per element, bf16
//   keeps 8 significant bits) on top:
//     |err| <= (2^-8 + 2 (K+2) 2^-24) mag, and the normalized RMSE stays below 4e-3 (observed ~1e-3).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/mxfp4-fixture.h"
#include "moxi/base/mx.h"
#include "moxi/kernels/mxfp4-dispatch.h"
#include "moxi/kernels/ref/mxfp4.h"
#include "moxi/kernels/x86/cpu.h"

namespace {

namespace k = moxi::kernels;
namespace mx = moxi::mx;
using k::act_quant;
using k::mxfp4_variant;

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

struct path {
  mxfp4_variant variant;
  int64_t gemv_max_tokens;  // 4: dispatcher default; 0: GEMM for every T
  const char* name;
  bool rounds_x;  // x rounded to bf16 when act == NONE
};

std::vector<path> available_paths() {
  std::vector<path> p;
  if (k::mxfp4_supported(mxfp4_variant::AVX512))
    p.push_back({mxfp4_variant::AVX512, 4, "avx512-gemv", false});
  if (k::mxfp4_supported(mxfp4_variant::AVX512_BF16)) {
    p.push_back({mxfp4_variant::AVX512_BF16, 4, "avx512_bf16-gemv", true});
    p.push_back({mxfp4_variant::AVX512_BF16, 0, "avx512_bf16-gemm", true});
  }
  return p;
}

TEST(Mxfp4Fast, EveryAvailableVariantMatchesRefOverManyShapes) {
  const auto paths = available_paths();
  if (paths.empty()) GTEST_SKIP() << "no fast MXFP4 variant on this CPU";
  struct shape {
    int64_t T, N, K;
  };
  const shape shapes[] = {{1, 1, 32},     {1, 17, 64},   {2, 16, 96},    {3, 33, 160},   {4, 31, 1056},
                          {5, 40, 64},    {7, 15, 2080}, {12, 48, 256},  {13, 50, 128},  {16, 257, 512},
                          {25, 33, 1088}, {31, 100, 96}, {64, 64, 2048}, {1, 300, 4096}, {200, 40, 320},
                          {64, 17, 32},   {9, 1, 1024},  {2, 129, 3072}};
  // Observed worst figures per path and x rounding, printed for docs/kernels.md.
  std::vector<stats> seen(paths.size() * 2);
  for (const shape sh : shapes) {
    const weights w = random_weights(sh.N, sh.K, uint64_t(sh.T * 1000 + sh.N * 7 + sh.K));
    const std::vector<float> x = activations(size_t(sh.T * sh.K), uint64_t(sh.N + sh.K));
    for (const act_quant act : {act_quant::NONE, act_quant::MXFP8_E4M3, act_quant::MXFP8_E5M2}) {
      std::vector<float> want(size_t(sh.T * sh.N));
      k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), sh.T, sh.N, sh.K, act);
      const std::vector<double> mag = magnitudes(x, w, sh.T, sh.N, sh.K, act);
      for (const path& p : paths) {
        const k::packed_mxfp4 pw = k::pack_mxfp4(w.blocks.data(), w.scales.data(), sh.N, sh.K, p.variant);
        std::vector<float> got(size_t(sh.T * sh.N), std::nanf(""));
        k::matmul_mxfp4(x.data(), pw, got.data(), sh.T, act, {p.gemv_max_tokens});
        const bool rounds = p.rounds_x && act == act_quant::NONE;
        expect_matches_ref(got, want, mag, sh.K, rounds,
                           std::string(p.name) + " T=" + std::to_string(sh.T) + " N=" + std::to_string(sh.N) +
                               " K=" + std::to_string(sh.K) + " act=" + std::to_string(int(act)),
                           seen[size_t(&p - paths.data()) * 2 + rounds]);
      }
    }
  }
  std::vector<std::string> names;
  for (const path& p : paths) names.push_back(p.name);
  print_worst(seen, names);
}

TEST(Mxfp4Fast, SpecialScalesNanZeroAndExtremesMatchRef) {
  const auto paths = available_paths();
  if (paths.empty()) GTEST_SKIP() << "no fast MXFP4 variant on this CPU";
  const int64_t N = 20, K = 128, nb = K / 32;
  for (const int64_t T : {1, 6}) {
    weights w = random_weights(N, K, 3);
    w.scales[size_t(2 * nb + 1)] = 0xFF;  // row 2: NaN block -> NaN output
    for (int64_t j = 0; j < 16; ++j) w.blocks[size_t((5 * nb + 2) * 16 + j)] = 0;  // row 5: zero block ...
    w.scales[size_t(5 * nb + 2)] = 0x00;                                           // ... with scale 2^-127
    for (int64_t b = 0; b < nb; ++b) w.scales[size_t(7 * nb + b)] = uint8_t(127 + 100);  // row 7: huge scales
    for (int64_t b = 0; b < nb; ++b) w.scales[size_t(8 * nb + b)] = uint8_t(127 - 100);  // row 8: tiny scales
    const std::vector<float> x = activations(size_t(T * K), 5);
    std::vector<float> want(size_t(T * N));
    k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), want.data(), T, N, K, act_quant::NONE);
    const std::vector<double> mag = magnitudes(x, w, T, N, K, act_quant::NONE);
    for (const path& p : paths) {
      const k::packed_mxfp4 pw = k::pack_mxfp4(w.blocks.data(), w.scales.data(), N, K, p.variant);
      std::vector<float> got(size_t(T * N));
      k::matmul_mxfp4(x.data(), pw, got.data(), T, act_quant::NONE, {p.gemv_max_tokens});
      for (int64_t t = 0; t < T; ++t) EXPECT_TRUE(std::isnan(got[size_t(t * N + 2)])) << p.name;
      const stats s = compare_to_ref(got, want, mag, allowed_rel(K, p.rounds_x));
      EXPECT_EQ(s.nan_mismatch, 0) << p.name << " T=" << T;
      EXPECT_LE(s.worst_ratio, 1.0) << p.name << " T=" << T;
    }
  }
}

// The VBMI decode (VPERMI2B) and the widen/shift/ternary-logic decode give the GEMV the same bf16 weights in
// the same VDPBF16PS order, so their outputs must be bit-identical (the tolerance test above holds both
// against ref::matmul_mxfp4; this one pins them to each other, including ragged panels and NaN scales).
TEST(Mxfp4Fast, VbmiGemvDecodeIsBitIdenticalToTheClassicDecode) {
  if (!k::mxfp4_supported(mxfp4_variant::AVX512_BF16) || !k::x86::cpu().avx512_vbmi)
    GTEST_SKIP() << "no AVX512-BF16 + VBMI on this CPU";
  k::mxfp4_options classic;
  classic.no_vbmi = true;
  for (const int64_t N : {1, 17, 300})
    for (const int64_t K : {32, 96, 4096})
      for (int64_t T = 1; T <= 4; ++T) {
        weights w = random_weights(N, K, uint64_t(N * 7 + K + T));
        w.scales[0] = 255;  // a NaN block
        const std::vector<float> x = activations(size_t(T * K), uint64_t(T + K));
        const k::packed_mxfp4 pw =
            k::pack_mxfp4(w.blocks.data(), w.scales.data(), N, K, mxfp4_variant::AVX512_BF16);
        std::vector<float> a(size_t(T * N)), b(size_t(T * N));
        k::matmul_mxfp4(x.data(), pw, a.data(), T, act_quant::NONE);
        k::matmul_mxfp4(x.data(), pw, b.data(), T, act_quant::NONE, classic);
        EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << "N=" << N << " K=" << K << " T=" << T;
      }
}

TEST(Mxfp4Fast, UnpackedConvenienceEqualsPackedBestVariant) {
  const int64_t T = 3, N = 37, K = 192;
  const weights w = random_weights(N, K, 8);
  const std::vector<float> x = activations(size_t(T * K), 9);
  std::vector<float> a(size_t(T * N)), b(size_t(T * N));
  k::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), a.data(), T, N, K, act_quant::MXFP8_E4M3);
  const k::packed_mxfp4 pw = k::pack_mxfp4(w.blocks.data(), w.scales.data(), N, K);
  EXPECT_EQ(pw.variant(), k::mxfp4_best_variant());
  k::matmul_mxfp4(x.data(), pw, b.data(), T, act_quant::MXFP8_E4M3);
  EXPECT_EQ(a, b);
}

// Run in a child with MOXI_KERNELS=ref (the variant is chosen once per process, so the parent cannot
// switch): there the default variant must be REF and its result bit-identical to ref::matmul_mxfp4.
TEST(Mxfp4Fast, MoxiKernelsRefForcesTheScalarPath) {
  const char* env = std::getenv("MOXI_KERNELS");
  if (env != nullptr && std::string(env) == "ref") {
    EXPECT_EQ(k::mxfp4_best_variant(), mxfp4_variant::REF);
    const int64_t T = 9, N = 21, K = 96;
    const weights w = random_weights(N, K, 4);
    const std::vector<float> x = activations(size_t(T * K), 6);
    std::vector<float> a(size_t(T * N)), b(size_t(T * N));
    k::ref::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), a.data(), T, N, K, act_quant::NONE);
    k::matmul_mxfp4(x.data(), k::pack_mxfp4(w.blocks.data(), w.scales.data(), N, K), b.data(), T,
                    act_quant::NONE);
    EXPECT_EQ(a, b);
    k::matmul_mxfp4(x.data(), w.blocks.data(), w.scales.data(), b.data(), T, N, K, act_quant::NONE);
    EXPECT_EQ(a, b);
    return;
  }
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(len, 0);
  exe[len] = '\0';
  const std::string cmd = std::string("MOXI_KERNELS=ref '") + exe +
                          "' --gtest_filter=Mxfp4Fast.MoxiKernelsRefForcesTheScalarPath > /dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
}

}  // namespace
