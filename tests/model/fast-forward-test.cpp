// The forward pass on the fast kernels against the scalar reference, on tiny random checkpoints of every
// architecture. A model loaded with fast kernels (BF16 Linear weights, MXFP4 experts packed) and run under
// a kernels::backend_scope of the reference must equal, bit for bit, a model loaded and run as
// MOXI_KERNELS=ref does; run fast it must stay within the tolerance below.
//
// Tolerance: every fast matmul has exact products and differs from ref only in fp32 summation order
// (|err| <= 2 (K+2) 2^-24 sum|x w| per output, tests/kernels/backend-ops-test.cpp),
// but the MXFP8 activation fake-quant before each expert GEMM and the top-k routing are step functions: an
// ulp-level change can move a value across a rounding boundary of an E4M3 block (one element changes by up
// to 2^-4 relative) or swap two near-tied experts, so the logits' deviation is not bounded by the kernels'
// bound. Observed on AMD Zen 4 (avx512_bf16 MXFP4, avx512 dense): max |fast - ref| <= 1.3e-6 max|ref|, mean
// <= 2e-7 max|ref| on all three configs. Bound: max <= 1e-3 max|ref| (room for an occasional E4M3 flip) and
// mean <= 1e-4 max|ref| (a wrong kernel gives O(1) errors everywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>

#include "common/model-fixture.h"
#include "common/temp-dir.h"
#include "moxi/formats/model-config.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/model.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

using scratch_dir = moxi::testing::temp_dir;

std::string make_checkpoint(const scratch_dir& s, const std::string& name) {
  return moxi::testing::init_test_checkpoint(s.path(), name, 7);
}

std::vector<token_id> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  return moxi::testing::random_token_ids(n, vocab, seed);
}

// Logits of a prefill of `prefill` tokens then single-token decode steps for the rest (both kernel shapes).
std::vector<float> run(const model::model& m, const std::vector<token_id>& tokens, size_t prefill) {
  auto cache = m.new_cache();
  auto out = m.forward(std::span(tokens).first(prefill), *cache);
  for (size_t i = prefill; i < tokens.size(); ++i) {
    const auto l = m.forward(std::span(tokens).subspan(i, 1), *cache);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

const char* const kConfigs[] = {"tiny-seed.json", "tiny-kimi-linear.json", "tiny-deepseek-v3.2.json",
                                "tiny-hybrid-swa.json"};

TEST(FastForward, FastLoadedModelRunsTheReferenceBitForBitAndFastWithinTolerance) {
  scratch_dir dir;
  for (const char* cfg : kConfigs) {
    SCOPED_TRACE(cfg);
    const std::string ck = make_checkpoint(dir, cfg);
    std::optional<model::model> ref_model;
    {
      kernels::backend_scope ref(
          kernels::reference());  // loads exactly as MOXI_KERNELS=ref does (f32 weights, no packs)
      ref_model.emplace(model::model::load(ck));
    }
    const auto fast_model = model::model::load(ck);
    const auto tokens = random_tokens(40, fast_model.config().vocab_size, 3);
    std::vector<float> want, ref_of_fast;
    {
      kernels::backend_scope ref(kernels::reference());
      want = run(*ref_model, tokens, 33);
      ref_of_fast = run(fast_model, tokens, 33);
    }
    ASSERT_EQ(want.size(), ref_of_fast.size());
    EXPECT_EQ(0, std::memcmp(want.data(), ref_of_fast.data(), want.size() * sizeof(float)));

    const auto got = run(fast_model, tokens, 33);
    ASSERT_EQ(got.size(), want.size());
    double max_ref = 0, max_err = 0, sum_err = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << i;
      max_ref = std::max(max_ref, double(std::fabs(want[i])));
      const double e = std::fabs(double(got[i]) - want[i]);
      max_err = std::max(max_err, e);
      sum_err += e;
    }
    const double mean_err = sum_err / double(got.size());
    std::printf("%s: fast vs ref max err %.3g, mean err %.3g of max|ref| %.3g (kernels %s)\n", cfg,
                max_err / max_ref, mean_err / max_ref, max_ref, kernels::active().name());
    EXPECT_LE(max_err, 1e-3 * max_ref);
    EXPECT_LE(mean_err, 1e-4 * max_ref);
  }
}

}  // namespace
