// Sliding-window attention reference kernel against an independent fp64 naive attention: the full [T, S]
// score matrix with every key outside (i - window, i] masked to -inf, softmax over the row, weighted sum of
// values; over MHA and GQA head groupings, windows smaller and larger than the context, window 1 (a query
// sees only itself), and queries after cached keys (T < S). Tolerance: relative RMSE 1e-6 (the kernel runs
// in fp32). Also: a key just outside the window has no influence, and one just inside does.
#include "moxi/kernels/ref/swa.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace {

namespace ref = moxi::kernels::ref;

std::vector<float> random_vec(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// fp64: scores for every (query, key) pair, then the mask.
std::vector<double> naive(const std::vector<float>& q, const std::vector<float>& k,
                          const std::vector<float>& v, int64_t T, int64_t S, int64_t H, int64_t KVH,
                          int64_t D, int64_t W, double scale) {
  std::vector<double> o(size_t(T * H * D), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h * KVH / H;  // consecutive query heads share a KV head
      std::vector<double> p(static_cast<size_t>(S));
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s < S; ++s) {
        const int64_t i = S - T + t;
        if (s > i || s <= i - W) {
          p[size_t(s)] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double acc = 0;
        for (int64_t d = 0; d < D; ++d)
          acc += double(q[size_t((t * H + h) * D + d)]) * double(k[size_t((s * KVH + g) * D + d)]);
        p[size_t(s)] = acc * scale;
        mx = std::max(mx, p[size_t(s)]);
      }
      double sum = 0;
      for (auto& x : p) sum += (x = std::exp(x - mx));
      for (int64_t s = 0; s < S; ++s)
        for (int64_t d = 0; d < D; ++d)
          o[size_t((t * H + h) * D + d)] += p[size_t(s)] / sum * double(v[size_t((s * KVH + g) * D + d)]);
    }
  return o;
}

struct shape {
  int64_t T, S, H, KVH, D, W;
};

TEST(SlidingWindowAttention, MatchesFp64MaskedSoftmax) {
  std::mt19937 rng(7);
  const shape shapes[] = {
      {12, 12, 4, 4, 8, 5},   // prefill, MHA, window inside the context
      {12, 12, 4, 2, 8, 5},   // GQA
      {9, 9, 6, 1, 16, 100},  // MQA, window larger than the context: plain causal attention
      {7, 7, 2, 2, 4, 1},     // window 1: each query sees only itself
      {1, 20, 4, 2, 8, 6},    // one decode query after 19 cached keys
      {5, 23, 8, 4, 8, 9},    // a chunk after cached keys
  };
  for (const auto& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "T=" << s.T << " S=" << s.S << " H=" << s.H << " KVH=" << s.KVH
                                      << " D=" << s.D << " W=" << s.W);
    const auto q = random_vec(size_t(s.T * s.H * s.D), rng);
    const auto k = random_vec(size_t(s.S * s.KVH * s.D), rng);
    const auto v = random_vec(size_t(s.S * s.KVH * s.D), rng);
    const float scale = 1.0f / std::sqrt(float(s.D));
    std::vector<float> got(size_t(s.T * s.H * s.D));
    ref::sliding_window_attention(q.data(), k.data(), v.data(), got.data(), s.T, s.S, s.H, s.KVH, s.D, s.W,
                                  scale);
    const auto want = naive(q, k, v, s.T, s.S, s.H, s.KVH, s.D, s.W, double(scale));
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      num += (want[i] - got[i]) * (want[i] - got[i]);
      den += want[i] * want[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-6);
  }
}

TEST(SlidingWindowAttention, KeysOutsideTheWindowHaveNoInfluence) {
  std::mt19937 rng(11);
  const int64_t T = 1, S = 10, H = 2, KVH = 1, D = 4, W = 4;
  const auto q = random_vec(size_t(T * H * D), rng);
  auto k = random_vec(size_t(S * KVH * D), rng), v = random_vec(size_t(S * KVH * D), rng);
  std::vector<float> a(size_t(T * H * D)), b(a.size()), c(a.size());
  ref::sliding_window_attention(q.data(), k.data(), v.data(), a.data(), T, S, H, KVH, D, W, 0.5f);
  // The query is key 9 and sees keys 6..9: changing key/value 5 changes nothing, changing 6 does.
  for (int64_t d = 0; d < D; ++d) k[size_t(5 * D + d)] += 3.0f, v[size_t(5 * D + d)] -= 2.0f;
  ref::sliding_window_attention(q.data(), k.data(), v.data(), b.data(), T, S, H, KVH, D, W, 0.5f);
  EXPECT_EQ(a, b);
  for (int64_t d = 0; d < D; ++d) v[size_t(6 * D + d)] -= 2.0f;
  ref::sliding_window_attention(q.data(), k.data(), v.data(), c.data(), T, S, H, KVH, D, W, 0.5f);
  EXPECT_NE(a, c);
}

}  // namespace
