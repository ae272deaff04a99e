// Training losses (see losses.h). The formulas follow DeepSeek-V3 (balance) and DeepSeek-V3.2 (indexer KL)
// as summarized in docs/deepseek.md.
#include "moxi/train/losses.h"

#include <algorithm>
#include <limits>

#include "moxi/base/error.h"

namespace moxi::train {

namespace F = torch::nn::functional;

namespace {

torch::Tensor all_valid(const torch::Tensor& like_bt, const torch::Tensor& valid) {
  return valid.defined() ? valid.to(torch::kBool)
                         : torch::ones({like_bt.size(0), like_bt.size(1)}, torch::kBool);
}

// Weighted mean of per-position cross-entropies: logits [B, L, V], targets i64 [B, L], weights f32 [B, L].
// With `count` (a global batch's number of targets), the sum over this batch divided by it.
torch::Tensor masked_ce(const torch::Tensor& logits, const torch::Tensor& targets, const torch::Tensor& w,
                        const double* count = nullptr) {
  const auto ce = F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}),
                                   F::CrossEntropyFuncOptions().reduction(torch::kNone));
  const auto wf = w.reshape({-1}).to(torch::kFloat32);
  if (count) return (ce * wf).sum() / std::max(1.0, *count);
  return (ce * wf).sum() / wf.sum().clamp_min(1.0f);
}

}  // namespace

torch::Tensor valid_for_length(const torch::Tensor& valid, int64_t len) {
  if (!valid.defined() || valid.size(1) == len) return valid;
  if (valid.size(1) == len + 2) return valid.slice(1, 2);  // MTP position i is real iff token i + 2 is
  throw error("valid_for_length: no mask for length " + std::to_string(len) + " of a batch of length " +
              std::to_string(valid.size(1)));
}

torch::Tensor sequence_balance_loss(const torch::Tensor& experts, const torch::Tensor& scores,
                                    int64_t num_experts, const torch::Tensor& valid) {
  const int64_t B = experts.size(0), T = experts.size(1), K = experts.size(2);
  const auto v = all_valid(experts, valid);                     // [B, T]
  const auto n = v.sum(1).to(torch::kFloat32).clamp_min(1.0f);  // valid tokens per row
  // f_i: how often expert i is picked in the sequence, scaled so that uniform routing gives 1 (no gradient).
  const auto picks = v.unsqueeze(-1).expand({B, T, K}).to(torch::kFloat32).reshape({B, T * K});
  const auto counts =
      torch::zeros({B, num_experts}, torch::kFloat32).scatter_add(1, experts.reshape({B, T * K}), picks);
  const auto f = counts * double(num_experts) / (double(K) * n.unsqueeze(1));
  // P_i: mean normalized affinity over the valid tokens (differentiable, through the router).
  const auto P = ((scores / scores.sum(-1, true)) * v.unsqueeze(-1).to(torch::kFloat32)).sum(1) /
                 n.unsqueeze(1);  // [B, E]
  return (f * P).sum(-1).mean();
}

namespace {

torch::Tensor indexer_kl(const indexer_stats& s, const torch::Tensor& valid, const double* count) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const auto logq = torch::log_softmax(s.scores.masked_fill(s.support.logical_not(), neg_inf), -1);
  const auto p = s.target.masked_fill(s.support.logical_not(), 0.0f);
  // p log p - p log q where p > 0 (0 log 0 = 0; q is never 0 on the support).
  const auto pos = p.gt(0);
  const auto terms = torch::where(pos, p * (torch::log(p.clamp_min(1e-30f)) - logq), torch::zeros_like(p));
  const auto v = all_valid(s.scores, valid).to(torch::kFloat32);  // [B, T]
  if (count) return (terms.sum(-1) * v).sum() / std::max(1.0, *count);
  return (terms.sum(-1) * v).sum() / v.sum().clamp_min(1.0f);
}

}  // namespace

torch::Tensor indexer_kl_loss(const indexer_stats& s, const torch::Tensor& valid) {
  return indexer_kl(s, valid, nullptr);
}

batch_counts count_batch(const torch::Tensor& tokens, const token_masks& masks) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  batch_counts c;
  c.rows = double(B);
  if (masks.target.defined()) {
    const auto t = masks.target.to(torch::kFloat64);
    c.ce_targets = t.slice(1, 1).sum().item<double>();
    c.mtp_targets = t.slice(1, 2).sum().item<double>();
  } else {
    c.ce_targets = double(B * std::max<int64_t>(0, T - 1));
    c.mtp_targets = double(B * std::max<int64_t>(0, T - 2));
  }
  if (masks.valid.defined()) {
    const auto v = masks.valid.to(torch::kFloat64);
    c.valid = v.sum().item<double>();
    c.valid_mtp = v.slice(1, 2).sum().item<double>();
  } else {
    c.valid = double(B * T);
    c.valid_mtp = double(B * std::max<int64_t>(0, T - 2));
  }
  return c;
}

loss_terms training_loss(const train_model& m, const torch::Tensor& tokens, const loss_options& opts,
                         const token_masks& masks, const torch::Tensor& media, const batch_counts* global) {
  const auto& c = m.config();
  const int64_t T = tokens.size(1);
  if (T < 2) throw error("training_loss: sequences need at least 2 tokens");
  const auto target = masks.target.defined() ? masks.target.to(torch::kFloat32)
                                             : torch::ones(tokens.sizes(), torch::kFloat32);
  loss_terms r;
  const auto out = m.forward(tokens, nullptr, &r.stats, media);
  r.ce = masked_ce(out.logits.slice(1, 0, T - 1), tokens.slice(1, 1), target.slice(1, 1),
                   global ? &global->ce_targets : nullptr);
  r.mtp = torch::zeros({}, torch::kFloat32);
  if (c.num_mtp_layers > 0 && T >= 3) {
    // Depth 0 at position i reads h_i and t_{i+1} and predicts t_{i+2}.
    const auto logits =
        m.mtp_forward(out.hidden.slice(1, 0, T - 2), tokens.slice(1, 1, T - 1), 0, nullptr, &r.stats);
    r.mtp =
        masked_ce(logits, tokens.slice(1, 2), target.slice(1, 2), global ? &global->mtp_targets : nullptr);
  }
  r.balance = torch::zeros({}, torch::kFloat32);
  for (const auto& s : r.stats.moe)
    r.balance = r.balance + sequence_balance_loss(s.experts, s.scores, c.moe.num_experts,
                                                  valid_for_length(masks.valid, s.experts.size(1)));
  // A mean over this batch's rows; a slice's share of the global batch's mean is rows / global rows of it.
  if (global) r.balance = r.balance * (double(tokens.size(0)) / std::max(1.0, global->rows));
  r.indexer_kl = torch::zeros({}, torch::kFloat32);
  for (const auto& s : r.stats.indexer) {
    const int64_t len = s.scores.size(1);
    const double* count = !global ? nullptr : len == T ? &global->valid : &global->valid_mtp;
    r.indexer_kl = r.indexer_kl + indexer_kl(s, valid_for_length(masks.valid, len), count);
  }
  if (!r.stats.indexer.empty()) r.indexer_kl = r.indexer_kl / double(r.stats.indexer.size());
  r.total =
      r.ce + opts.mtp_weight * r.mtp + opts.balance_alpha * r.balance + opts.indexer_weight * r.indexer_kl;
  return r;
}

torch::Tensor router_load(const moe_stats& s, int64_t num_experts, const torch::Tensor& valid) {
  torch::NoGradGuard no_grad;
  const int64_t B = s.experts.size(0), T = s.experts.size(1), K = s.experts.size(2);
  const auto v = all_valid(s.experts, valid_for_length(valid, T));
  const auto picks = v.unsqueeze(-1).expand({B, T, K}).to(torch::kFloat32).reshape({-1});
  return torch::zeros({num_experts}, torch::kFloat32).scatter_add(0, s.experts.reshape({-1}), picks);
}

void move_router_bias(train_model& m, const std::string& bias, const torch::Tensor& load, double speed) {
  torch::NoGradGuard no_grad;
  // sign(mean - load): +speed for underloaded experts, -speed for overloaded ones, 0 at the mean.
  m.params().at(bias).add_(torch::sign(load.mean() - load) * speed);
}

void update_router_bias(train_model& m, const forward_stats& stats, double speed,
                        const torch::Tensor& valid) {
  const int64_t E = m.config().moe.num_experts;
  for (const auto& s : stats.moe) move_router_bias(m, s.bias, router_load(s, E, valid), speed);
}

}  // namespace moxi::train
