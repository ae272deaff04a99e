// Scalar reference MoE router (see moe.h; DeepSeek-V3 inference/model.py Gate, HF DeepseekV3TopkRouter).
#include "moxi/kernels/ref/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/kernels/ref/basic.h"

namespace moxi::kernels::ref {

namespace {

// Ranking key: NaN is ordered below -inf so that comparisons form a strict weak order.
struct Ranked {
  const float* v;
  bool operator()(int32_t a, int32_t b) const {
    const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
    if (na != nb) return nb;
    if (!na && v[a] != v[b]) return v[a] > v[b];
    return a < b;
  }
};

}  // namespace

void moe_route(const float* logits, const float* bias, const RouterConfig& cfg, int32_t* experts,
               float* weights, int64_t T) {
  const int64_t E = cfg.n_experts, G = cfg.n_group;
  MOXI_ASSERT(E > 0 && G > 0 && E % G == 0, "n_experts must be a positive multiple of n_group");
  const int64_t per_group = E / G;
  MOXI_ASSERT(cfg.topk_group >= 1 && cfg.topk_group <= G);
  MOXI_ASSERT(cfg.top_k >= 1 && cfg.top_k <= cfg.topk_group * per_group,
              "top_k exceeds the experts of the kept groups");
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> s(static_cast<size_t>(E)), b(static_cast<size_t>(E)), gscore(static_cast<size_t>(G)),
      tmp(static_cast<size_t>(per_group));
  std::vector<int32_t> order(static_cast<size_t>(E)), gorder(static_cast<size_t>(G));
  std::vector<char> keep(static_cast<size_t>(G));

  for (int64_t t = 0; t < T; ++t) {
    const float* lt = logits + t * E;
    if (cfg.scoring == RouterScoring::kSigmoid) {
      sigmoid(lt, s.data(), E);
    } else {
      softmax(lt, s.data(), 1, E);
    }
    for (int64_t e = 0; e < E; ++e) b[size_t(e)] = bias ? s[size_t(e)] + bias[e] : s[size_t(e)];

    if (G > 1) {
      for (int64_t g = 0; g < G; ++g) {
        const float* src = (bias ? b.data() : s.data()) + g * per_group;
        std::copy(src, src + per_group, tmp.begin());
        if (bias) {
          // Sum of the two largest biased scores (one if the group has a single expert).
          const int64_t m = std::min<int64_t>(2, per_group);
          std::partial_sort(tmp.begin(), tmp.begin() + m, tmp.end(), std::greater<float>());
          gscore[size_t(g)] = m == 2 ? tmp[0] + tmp[1] : tmp[0];
        } else {
          gscore[size_t(g)] = *std::max_element(tmp.begin(), tmp.end());
        }
      }
      std::iota(gorder.begin(), gorder.end(), 0);
      std::partial_sort(gorder.begin(), gorder.begin() + cfg.topk_group, gorder.end(), Ranked{gscore.data()});
      std::fill(keep.begin(), keep.end(), 0);
      for (int64_t j = 0; j < cfg.topk_group; ++j) keep[size_t(gorder[size_t(j)])] = 1;
      // -inf, never 0: a biased score may be negative, and a 0 would let a masked expert win.
      for (int64_t e = 0; e < E; ++e) {
        if (!keep[size_t(e / per_group)]) b[size_t(e)] = neg_inf;
      }
    }

    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + cfg.top_k, order.end(), Ranked{b.data()});
    int32_t* et = experts + t * cfg.top_k;
    float* wt = weights + t * cfg.top_k;
    float sum = 0.0f;
    for (int64_t j = 0; j < cfg.top_k; ++j) {
      et[j] = order[size_t(j)];
      wt[j] = s[size_t(et[j])];  // the UNbiased score: the bias only steers selection
      sum += wt[j];
    }
    // Divide (not multiply by a reciprocal) and scale afterwards, in HF's order.
    for (int64_t j = 0; j < cfg.top_k; ++j) {
      if (cfg.renormalize) wt[j] /= sum + 1e-20f;
      wt[j] *= cfg.routed_scaling_factor;
    }
  }
}

}  // namespace moxi::kernels::ref
