// DSA lightning indexer reference kernels: the FP8 key rows' layout, scores against a plain fp64 loop over
// the decoded keys (causal -inf outside), top-k against a full stable sort of the candidates (ties by lower
// index, -1 padding, NaN last).
#include "moxi/kernels/ref/dsa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "moxi/base/mx.h"

namespace {

namespace ref = moxi::kernels::ref;
using Vec = std::vector<float>;

Vec normal(size_t n, std::mt19937_64& gen) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// The cached key rows: E4M3 codes (decoded by mx's table, whose every byte mx-test checks against the bit
// fields), zero padding to whole words, the fp32 scale after them.
TEST(Indexer, KeyRowsHoldCodesPaddingAndScale) {
  std::mt19937_64 gen(3);
  for (int64_t D : {int64_t{16}, int64_t{18}, int64_t{64}}) {
    const int64_t T = 3, stride = ref::index_key_bytes(D);
    EXPECT_EQ(stride, (D + 3) / 4 * 4 + 4);
    Vec k = normal(size_t(T * D), gen);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) k[size_t(t * D + d)] *= std::ldexp(1.0f, int(t * 9) - 9);
    std::vector<uint8_t> rows(size_t(T * stride), 0xAA);
    ref::quantize_index_keys(k.data(), rows.data(), T, D);
    for (int64_t t = 0; t < T; ++t) {
      const uint8_t* row = rows.data() + t * stride;
      std::vector<uint8_t> codes(static_cast<size_t>(D));
      const float scale = moxi::mx::quantize_fp8_row(k.data() + t * D, size_t(D), codes.data());
      EXPECT_TRUE(std::equal(codes.begin(), codes.end(), row));
      for (int64_t p = D; p < ref::index_key_scale_offset(D); ++p) EXPECT_EQ(row[p], 0);
      EXPECT_EQ(ref::index_key_scale(row, D), scale);
      Vec dec(static_cast<size_t>(D));
      ref::dequantize_index_key(row, D, dec.data());
      for (int64_t d = 0; d < D; ++d) {
        EXPECT_EQ(dec[size_t(d)], moxi::mx::kFp8E4m3[codes[size_t(d)]] * scale);
        // Within half an E4M3 step (3 mantissa bits) of the key, or of the subnormal grid at the bottom.
        const float x = k[size_t(t * D + d)];
        EXPECT_LE(std::fabs(dec[size_t(d)] - x),
                  std::max(std::fabs(x) / 16, std::ldexp(scale, -10)) * 1.0001f);
      }
    }
  }
}

TEST(Indexer, ScoresMatchPlainLoop) {
  const int64_t HI = 4, D = 16;
  std::mt19937_64 gen(1);
  for (auto [T, S] : {std::pair<int64_t, int64_t>{5, 5}, {3, 9}, {1, 12}}) {
    const Vec q = normal(size_t(T * HI * D), gen), kf = normal(size_t(S * D), gen),
              w = normal(size_t(T * HI), gen);
    std::vector<uint8_t> kr(size_t(S * ref::index_key_bytes(D)));
    ref::quantize_index_keys(kf.data(), kr.data(), S, D);
    Vec k(size_t(S * D));  // the keys the scores see, decoded in fp64 from the codes and the scale
    for (int64_t s = 0; s < S; ++s) {
      const uint8_t* row = kr.data() + s * ref::index_key_bytes(D);
      for (int64_t d = 0; d < D; ++d)
        k[size_t(s * D + d)] = float(double(moxi::mx::kFp8E4m3[row[d]]) * ref::index_key_scale(row, D));
    }
    Vec scores(size_t(T * S));
    ref::indexer_scores(q.data(), kr.data(), w.data(), scores.data(), T, S, HI, D);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t s = 0; s < S; ++s) {
        const float got = scores[size_t(t * S + s)];
        if (s > S - T + t) {
          EXPECT_EQ(got, -std::numeric_limits<float>::infinity());
          continue;
        }
        double want = 0;
        for (int64_t j = 0; j < HI; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(q[size_t((t * HI + j) * D + d)]) * k[size_t(s * D + d)];
          want += double(w[size_t(t * HI + j)]) * std::max(dot, 0.0);
        }
        EXPECT_NEAR(got, want, 1e-5 * (1 + std::abs(want)));
      }
    }
  }
}

// Reference top-k: stable sort of all causal candidates by score descending (NaN last) keeps equal
// scores in ascending position order, which is the documented tie rule.
std::vector<int32_t> topk_by_full_sort(const Vec& row, int64_t n, int64_t k) {
  std::vector<int32_t> c(static_cast<size_t>(n));
  std::iota(c.begin(), c.end(), 0);
  std::stable_sort(c.begin(), c.end(), [&](int32_t a, int32_t b) {
    const float x = row[size_t(a)], y = row[size_t(b)];
    if (std::isnan(x) || std::isnan(y)) return !std::isnan(x) && std::isnan(y);
    return x > y;
  });
  std::vector<int32_t> out(size_t(k), -1);
  for (int64_t j = 0; j < std::min(n, k); ++j) out[size_t(j)] = c[size_t(j)];
  return out;
}

TEST(Indexer, TopkMatchesFullSortWithTiesPaddingAndNaN) {
  std::mt19937_64 gen(2);
  std::uniform_int_distribution<int> small(0, 3);  // 4 distinct values: many ties
  const float inf = std::numeric_limits<float>::infinity();
  for (auto [T, S] : {std::pair<int64_t, int64_t>{20, 20}, {6, 30}, {1, 1}}) {
    Vec scores(size_t(T * S));
    for (auto& x : scores) x = float(small(gen)) - 1.0f;
    scores[0] = -inf;  // a valid (causal) candidate that is masked still ranks, below finite scores
    if (S > 3) scores[2] = std::numeric_limits<float>::quiet_NaN();
    for (int64_t k : {int64_t{1}, int64_t{3}, int64_t{8}, S, S + 4}) {
      std::vector<int32_t> got(size_t(T * k));
      ref::indexer_topk(scores.data(), got.data(), T, S, k);
      for (int64_t t = 0; t < T; ++t) {
        const Vec row(scores.begin() + t * S, scores.begin() + (t + 1) * S);
        const std::vector<int32_t> want = topk_by_full_sort(row, S - T + t + 1, k);
        const std::vector<int32_t> row_got(got.begin() + t * k, got.begin() + (t + 1) * k);
        EXPECT_EQ(row_got, want) << "T=" << T << " S=" << S << " k=" << k << " t=" << t;
      }
    }
  }
}

}  // namespace
