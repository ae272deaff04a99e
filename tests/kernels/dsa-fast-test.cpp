// The dispatched DSA indexer scores (kernels::indexer_scores: an AVX-512 twin where the CPU has it) against
// ref::indexer_scores. The twin performs the reference's operations per (query, key) in the same order (no
// FMA contraction, std::max's comparison for the ReLU), so the scores, including the -inf of non-causal
// keys, must be bit-identical: key counts below, at and past the 16-lane block, several heads and queries,
// negative and zero dot products.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "moxi/kernels/dsa-dispatch.h"
#include "moxi/kernels/matmul-dispatch.h"
#include "moxi/kernels/ref/dsa.h"
#include "moxi/kernels/x86/cpu.h"

namespace {

using Vec = std::vector<float>;

Vec normal(std::mt19937_64& gen, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(DsaFast, IndexerScoresAreBitIdenticalToTheReference) {
  std::printf("indexer_scores dispatch: %s\n",
              moxi::kernels::fast_kernels() && moxi::kernels::x86::cpu().avx512 ? "avx512" : "ref");
  struct shape {
    int64_t T, S, HI, D;
  };
  for (const shape s : {shape{1, 1, 1, 16}, shape{3, 40, 4, 64}, shape{7, 7, 8, 32}, shape{5, 300, 4, 64},
                        shape{2, 17, 3, 20}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << s.T << " S=" << s.S << " HI=" << s.HI << " D=" << s.D);
    std::mt19937_64 gen(uint64_t(s.S * 7 + s.D));
    Vec q = normal(gen, size_t(s.T * s.HI * s.D));
    const Vec k = normal(gen, size_t(s.S * s.D)), w = normal(gen, size_t(s.T * s.HI));
    for (int64_t d = 0; d < s.D; ++d) q[size_t(d)] = 0.0f;  // query 0, head 0: every dot is exactly 0
    Vec want(size_t(s.T * s.S)), got(want.size(), 1.0f);
    moxi::kernels::ref::indexer_scores(q.data(), k.data(), w.data(), want.data(), s.T, s.S, s.HI, s.D);
    moxi::kernels::indexer_scores(q.data(), k.data(), w.data(), got.data(), s.T, s.S, s.HI, s.D);
    EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
  }
}

}  // namespace
