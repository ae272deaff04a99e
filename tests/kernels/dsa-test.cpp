// DSA lightning indexer reference kernels: scores against a plain fp64 loop (causal -inf outside), top-k
// against a full stable sort of the candidates (ties by lower index, -1 padding, NaN last).
#include "moxi/kernels/ref/dsa.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace {

namespace ref = moxi::kernels::ref;
using Vec = std::vector<float>;

Vec normal(size_t n, std::mt19937_64& gen) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(Indexer, ScoresMatchPlainLoop) {
  const int64_t HI = 4, D = 16;
  std::mt19937_64 gen(1);
  for (auto [T, S] : {std::pair<int64_t, int64_t>{5, 5}, {3, 9}, {1, 12}}) {
    const Vec q = normal(size_t(T * HI * D), gen), k = normal(size_t(S * D), gen),
              w = normal(size_t(T * HI), gen);
    Vec scores(size_t(T * S));
    ref::indexer_scores(q.data(), k.data(), w.data(), scores.data(), T, S, HI, D);
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
