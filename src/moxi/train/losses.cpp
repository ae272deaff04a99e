// Training losses (see losses.h). The formulas follow DeepSeek-V3 (balance) and DeepSeek-V3.2 (indexer KL)
// as summarized in shared/reference/dsa_mla_moe_mtp.md.
#include "moxi/train/losses.h"

#include <limits>

#include "moxi/base/error.h"

namespace moxi::train {

namespace F = torch::nn::functional;

torch::Tensor sequence_balance_loss(const torch::Tensor& experts, const torch::Tensor& scores,
                                    int64_t num_experts) {
  const int64_t B = experts.size(0), T = experts.size(1), K = experts.size(2);
  // f_i: how often expert i is picked in the sequence, scaled so that uniform routing gives 1 (no gradient).
  const auto counts =
      torch::zeros({B, num_experts}, torch::kFloat32)
          .scatter_add(1, experts.reshape({B, T * K}), torch::ones({B, T * K}, torch::kFloat32));
  const auto f = counts * (double(num_experts) / double(K * T));
  // P_i: mean normalized affinity (differentiable, through the router).
  const auto P = (scores / scores.sum(-1, true)).mean(1);  // [B, E]
  return (f * P).sum(-1).mean();
}

torch::Tensor indexer_kl_loss(const indexer_stats& s) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const auto logq = torch::log_softmax(s.scores.masked_fill(s.support.logical_not(), neg_inf), -1);
  const auto p = s.target.masked_fill(s.support.logical_not(), 0.0f);
  // p log p - p log q where p > 0 (0 log 0 = 0; q is never 0 on the support).
  const auto pos = p.gt(0);
  const auto terms = torch::where(pos, p * (torch::log(p.clamp_min(1e-30f)) - logq), torch::zeros_like(p));
  return terms.sum(-1).mean();
}

loss_terms training_loss(const train_model& m, const torch::Tensor& tokens, const loss_options& opts) {
  const auto& c = m.config();
  const int64_t T = tokens.size(1), V = c.vocab_size;
  if (T < 2) throw error("training_loss: sequences need at least 2 tokens");
  loss_terms r;
  const auto out = m.forward(tokens, nullptr, &r.stats);
  r.ce = F::cross_entropy(out.logits.slice(1, 0, T - 1).reshape({-1, V}), tokens.slice(1, 1).reshape({-1}));
  r.mtp = torch::zeros({}, torch::kFloat32);
  if (c.num_mtp_layers > 0 && T >= 3) {
    // Depth 0 at position i reads h_i and t_{i+1} and predicts t_{i+2}.
    const auto logits =
        m.mtp_forward(out.hidden.slice(1, 0, T - 2), tokens.slice(1, 1, T - 1), 0, nullptr, &r.stats);
    r.mtp = F::cross_entropy(logits.reshape({-1, V}), tokens.slice(1, 2).reshape({-1}));
  }
  r.balance = torch::zeros({}, torch::kFloat32);
  for (const auto& s : r.stats.moe)
    r.balance = r.balance + sequence_balance_loss(s.experts, s.scores, c.moe.num_experts);
  r.indexer_kl = torch::zeros({}, torch::kFloat32);
  for (const auto& s : r.stats.indexer) r.indexer_kl = r.indexer_kl + indexer_kl_loss(s);
  if (!r.stats.indexer.empty()) r.indexer_kl = r.indexer_kl / double(r.stats.indexer.size());
  r.total =
      r.ce + opts.mtp_weight * r.mtp + opts.balance_alpha * r.balance + opts.indexer_weight * r.indexer_kl;
  return r;
}

void update_router_bias(train_model& m, const forward_stats& stats, double speed) {
  torch::NoGradGuard no_grad;
  const int64_t E = m.config().moe.num_experts;
  for (const auto& s : stats.moe) {
    const auto flat = s.experts.reshape({-1});
    const auto load =
        torch::zeros({E}, torch::kFloat32).scatter_add(0, flat, torch::ones_like(flat, torch::kFloat32));
    // sign(mean - load): +speed for underloaded experts, -speed for overloaded ones, 0 at the mean.
    m.params().at(s.bias).add_(torch::sign(load.mean() - load) * speed);
  }
}

}  // namespace moxi::train
