// MoE router reference kernel against a per-token brute force written here by counting (an expert is
// selected iff its group is among the topk_group best and fewer than top_k kept experts beat it), with
// ties, negative biased scores under group limiting (the 0-vs--inf mask trap), renorm on/off, scaling,
// softmax scoring and the bias-free (max) group score.
#include "moxi/kernels/ref/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ref = moxi::kernels::ref;
using Vec = std::vector<float>;

struct Routed {
  std::vector<int32_t> experts;
  Vec weights;
};

// "a beats b": higher value, or equal value and lower index.
bool beats(float va, int64_t a, float vb, int64_t b) {
  return va > vb || (va == vb && a < b);
}

Routed brute_force(const Vec& logits, const Vec* bias, const ref::RouterConfig& cfg, int64_t T) {
  const int64_t E = cfg.n_experts, G = cfg.n_group, per = E / G;
  Routed r;
  for (int64_t t = 0; t < T; ++t) {
    Vec s(static_cast<size_t>(E)), b(static_cast<size_t>(E));
    if (cfg.scoring == ref::RouterScoring::kSigmoid) {
      for (int64_t e = 0; e < E; ++e) s[size_t(e)] = 1.0f / (1.0f + std::exp(-logits[size_t(t * E + e)]));
    } else {
      double mx = -INFINITY, sum = 0;
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, double(logits[size_t(t * E + e)]));
      for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[size_t(t * E + e)] - mx);
      for (int64_t e = 0; e < E; ++e) s[size_t(e)] = float(std::exp(logits[size_t(t * E + e)] - mx) / sum);
    }
    for (int64_t e = 0; e < E; ++e) b[size_t(e)] = bias ? s[size_t(e)] + (*bias)[size_t(e)] : s[size_t(e)];
    // Group scores: sum of the two best biased scores, or the max unbiased score without a bias.
    Vec gs(static_cast<size_t>(G));
    for (int64_t g = 0; g < G; ++g) {
      Vec m(b.begin() + g * per, b.begin() + (g + 1) * per);
      std::sort(m.begin(), m.end(), std::greater<float>());
      gs[size_t(g)] = bias ? (per > 1 ? m[0] + m[1] : m[0])
                           : *std::max_element(s.begin() + g * per, s.begin() + (g + 1) * per);
    }
    auto kept = [&](int64_t g) {
      if (G == 1) return true;
      int64_t better = 0;
      for (int64_t h = 0; h < G; ++h) better += beats(gs[size_t(h)], h, gs[size_t(g)], g);
      return better < cfg.topk_group;
    };
    std::vector<std::pair<int64_t, int32_t>> chosen;  // (rank, expert)
    for (int64_t e = 0; e < E; ++e) {
      if (!kept(e / per)) continue;
      int64_t better = 0;
      for (int64_t f = 0; f < E; ++f) better += kept(f / per) && beats(b[size_t(f)], f, b[size_t(e)], e);
      if (better < cfg.top_k) chosen.push_back({better, int32_t(e)});
    }
    std::sort(chosen.begin(), chosen.end());
    EXPECT_EQ(int64_t(chosen.size()), cfg.top_k);
    double sum = 0;
    for (auto& c : chosen) sum += s[size_t(c.second)];
    for (auto& c : chosen) {
      r.experts.push_back(c.second);
      const double w = cfg.renormalize ? s[size_t(c.second)] / (sum + 1e-20) : s[size_t(c.second)];
      r.weights.push_back(float(w * cfg.routed_scaling_factor));
    }
  }
  return r;
}

void check(const std::string& what, const Vec& logits, const Vec* bias, const ref::RouterConfig& cfg,
           int64_t T) {
  std::vector<int32_t> experts(size_t(T * cfg.top_k));
  Vec weights(experts.size());
  ref::moe_route(logits.data(), bias ? bias->data() : nullptr, cfg, experts.data(), weights.data(), T);
  const Routed want = brute_force(logits, bias, cfg, T);
  EXPECT_EQ(experts, want.experts) << what;
  for (size_t i = 0; i < weights.size(); ++i)
    EXPECT_NEAR(weights[i], want.weights[i], 1e-6 * (1 + std::abs(want.weights[i]))) << what;
}

TEST(Router, MatchesBruteForce) {
  std::mt19937_64 gen(1);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_int_distribution<int> small(-2, 2);
  const int64_t T = 12;
  for (int64_t E : {8, 16, 32}) {
    for (int64_t G : {1, 2, 4, 8}) {
      if (E % G || E / G < 2) continue;
      for (int tie_mode = 0; tie_mode < 2; ++tie_mode) {
        for (int bias_mode = 0; bias_mode < 3; ++bias_mode) {  // none, random, strongly negative
          for (bool renorm : {true, false}) {
            ref::RouterConfig cfg;
            cfg.n_experts = E;
            cfg.n_group = G;
            cfg.topk_group = std::max<int64_t>(1, G / 2);
            cfg.top_k = std::min<int64_t>(4, cfg.topk_group * (E / G));
            cfg.renormalize = renorm;
            cfg.routed_scaling_factor = 2.5f;
            Vec logits(size_t(T * E));
            // Ties: integer logits (and integer biases) give exactly equal fp32 scores.
            for (auto& x : logits) x = tie_mode ? float(small(gen)) : nd(gen);
            Vec bias(static_cast<size_t>(E));
            for (auto& x : bias)
              x = bias_mode == 2 ? -3.0f + 0.5f * float(small(gen))
                                 : (tie_mode ? 0.25f * float(small(gen)) : nd(gen));
            const std::string what =
                "E=" + std::to_string(E) + " G=" + std::to_string(G) + " ties=" + std::to_string(tie_mode) +
                " bias=" + std::to_string(bias_mode) + " renorm=" + std::to_string(renorm);
            check(what, logits, bias_mode ? &bias : nullptr, cfg, T);
            cfg.scoring = ref::RouterScoring::kSoftmax;
            check(what + " softmax", logits, bias_mode ? &bias : nullptr, cfg, T);
          }
        }
      }
    }
  }
}

TEST(Router, NegativeBiasedScoresNeverSelectMaskedGroups) {
  // 4 groups of 4; biases make every biased score negative. Group 0 holds the best experts, so it is kept
  // (with topk_group 1); with a 0 mask the other groups' experts (0 > negative) would win instead.
  ref::RouterConfig cfg;
  cfg.n_experts = 16;
  cfg.n_group = 4;
  cfg.topk_group = 1;
  cfg.top_k = 3;
  Vec logits(16, -4.0f), bias(16, -5.0f);
  for (int e = 0; e < 4; ++e) logits[size_t(e)] = 3.0f - float(e);
  std::vector<int32_t> experts(3);
  Vec weights(3);
  ref::moe_route(logits.data(), bias.data(), cfg, experts.data(), weights.data(), 1);
  EXPECT_EQ(experts, (std::vector<int32_t>{0, 1, 2}));
  // Weights come from the unbiased sigmoid scores, renormalized.
  const double s0 = 1 / (1 + std::exp(-3.0)), s1 = 1 / (1 + std::exp(-2.0)), s2 = 1 / (1 + std::exp(-1.0));
  EXPECT_NEAR(weights[0], s0 / (s0 + s1 + s2), 1e-6);
  EXPECT_NEAR(weights[2], s2 / (s0 + s1 + s2), 1e-6);
}

TEST(Router, BiasSteersSelectionButNotWeights) {
  ref::RouterConfig cfg;
  cfg.n_experts = 4;
  cfg.top_k = 1;
  cfg.renormalize = false;
  cfg.routed_scaling_factor = 1.0f;
  const Vec logits = {2.0f, 0.0f, 0.0f, 0.0f}, bias = {0.0f, 0.0f, 1.0f, 0.0f};
  int32_t e = -1;
  float w = 0;
  ref::moe_route(logits.data(), bias.data(), cfg, &e, &w, 1);
  EXPECT_EQ(e, 2);           // 0.5 + 1 beats sigmoid(2) = 0.88
  EXPECT_FLOAT_EQ(w, 0.5f);  // the unbiased sigmoid(0)
}

}  // namespace
