// Policy-gradient arithmetic (see rl-core.h; formulas in docs/rl.md).
#include "moxi/train/rl-core.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "moxi/base/error.h"

namespace moxi::train::rl {

namespace {

struct named_agg {
  const char* name;
  loss_agg mode;
};
constexpr named_agg kAggs[] = {{"token-mean", loss_agg::token_mean},
                               {"seq-mean-token-mean", loss_agg::seq_mean_token_mean},
                               {"seq-mean-token-sum", loss_agg::seq_mean_token_sum},
                               {"seq-mean-token-sum-norm", loss_agg::seq_mean_token_sum_norm}};

// Sum over the valid tokens, as a 0-d tensor (the mask as the loss's dtype).
torch::Tensor masked_sum(const torch::Tensor& x, const torch::Tensor& mask) {
  return (x * mask.to(x.scalar_type())).sum();
}

torch::Tensor masked_mean(const torch::Tensor& x, const torch::Tensor& mask) {
  return masked_sum(x, mask) / mask.to(x.scalar_type()).sum().clamp_min(1);
}

}  // namespace

loss_agg parse_loss_agg(const std::string& s) {
  std::string names;
  for (const auto& a : kAggs) {
    if (s == a.name) return a.mode;
    names += std::string(names.empty() ? "" : ", ") + a.name;
  }
  throw error("unknown loss aggregation '" + s + "' (one of " + names + ")");
}

const char* to_string(loss_agg a) {
  for (const auto& n : kAggs)
    if (n.mode == a) return n.name;
  return "?";
}

kl_estimator parse_kl_estimator(const std::string& s) {
  if (s == "k1") return kl_estimator::k1;
  if (s == "k2") return kl_estimator::k2;
  if (s == "k3") return kl_estimator::k3;
  throw error("unknown KL estimator '" + s + "' (one of k1, k2, k3)");
}

const char* to_string(kl_estimator k) {
  switch (k) {
    case kl_estimator::k1:
      return "k1";
    case kl_estimator::k2:
      return "k2";
    case kl_estimator::k3:
      return "k3";
  }
  return "?";
}

torch::Tensor kl_penalty(const torch::Tensor& logp, const torch::Tensor& logp_ref, kl_estimator k) {
  const auto d = (logp - logp_ref).clamp(-20, 20);
  switch (k) {
    case kl_estimator::k1:
      return d;
    case kl_estimator::k2:
      return 0.5 * d * d;
    case kl_estimator::k3:
      return (torch::exp(-d) - 1 + d).clamp(-10, 10);
  }
  throw error("kl_penalty: bad estimator");
}

torch::Tensor aggregate(const torch::Tensor& loss, const torch::Tensor& mask, loss_agg mode,
                        double norm_length) {
  const auto m = mask.to(loss.scalar_type());
  switch (mode) {
    case loss_agg::token_mean:
      return masked_mean(loss, m);
    case loss_agg::seq_mean_token_mean:
    case loss_agg::seq_mean_token_sum: {
      const auto counts = m.sum(-1);
      const auto has = (counts > 0).to(loss.scalar_type());
      auto per_seq = (loss * m).sum(-1);
      if (mode == loss_agg::seq_mean_token_mean) per_seq = per_seq / counts.clamp_min(1);
      return (per_seq * has).sum() / has.sum().clamp_min(1);
    }
    case loss_agg::seq_mean_token_sum_norm: {
      if (!(norm_length > 0)) throw error("aggregate: norm_length must be > 0");
      const auto has = (m.sum(-1) > 0).to(loss.scalar_type());
      return (loss * m).sum() / (has.sum().clamp_min(1) * norm_length);
    }
  }
  throw error("aggregate: bad mode");
}

torch::Tensor grpo_advantages(const torch::Tensor& scores, const torch::Tensor& group, bool norm_by_std,
                              double eps) {
  if (scores.dim() != 1 || group.dim() != 1 || scores.size(0) != group.size(0))
    throw error("grpo_advantages: scores and group must be [N] of one length");
  const auto s = scores.to(torch::kFloat64).contiguous();
  const auto g = group.to(torch::kInt64).contiguous();
  const int64_t n = s.size(0);
  const double* sp = s.data_ptr<double>();
  const int64_t* gp = g.data_ptr<int64_t>();
  std::map<int64_t, std::vector<int64_t>> members;
  for (int64_t i = 0; i < n; ++i) members[gp[i]].push_back(i);
  auto out = torch::empty({n}, torch::kFloat64);
  double* op = out.data_ptr<double>();
  for (const auto& [id, idx] : members) {
    double mean = 0, sd = 1;
    if (idx.size() > 1) {
      for (auto i : idx) mean += sp[i];
      mean /= double(idx.size());
      double ss = 0;
      for (auto i : idx) ss += (sp[i] - mean) * (sp[i] - mean);
      sd = std::sqrt(ss / double(idx.size() - 1));  // unbiased, as torch.std
    }
    for (auto i : idx) op[i] = norm_by_std ? (sp[i] - mean) / (sd + eps) : sp[i] - mean;
  }
  return out.to(scores.scalar_type());
}

torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& mask, bool shift_mean) {
  const auto m = mask.to(x.scalar_type());
  const auto n = m.sum();
  const auto mean = masked_sum(x, m) / n.clamp_min(1);
  auto var = masked_sum((x - mean) * (x - mean), m) / n.clamp_min(1);
  var = var * n / (n - 1).clamp_min(1);  // unbiased
  auto w = (x - mean) * torch::rsqrt(var + 1e-8);
  if (!shift_mean) w = w + mean;
  return w;
}

gae_result gae(const torch::Tensor& rewards, const torch::Tensor& values, const torch::Tensor& mask,
               double gamma, double lam) {
  if (rewards.sizes() != values.sizes() || rewards.sizes() != mask.sizes() || rewards.dim() != 2)
    throw error("gae: rewards, values and mask must be [B, T] of one shape");
  torch::NoGradGuard no_grad;
  const auto m = mask.to(values.scalar_type());
  const int64_t B = rewards.size(0), T = rewards.size(1);
  auto next_value = torch::zeros({B}, values.options());
  auto next_adv = torch::zeros({B}, values.options());
  auto adv = torch::zeros_like(values);
  for (int64_t t = T - 1; t >= 0; --t) {
    const auto mt = m.select(1, t), vt = values.select(1, t);
    const auto delta = rewards.select(1, t) + gamma * next_value - vt;
    const auto a = delta + gamma * lam * next_adv;
    // On a masked position nothing changes: the next valid position's value and advantage carry over.
    next_value = vt * mt + (1 - mt) * next_value;
    next_adv = a * mt + (1 - mt) * next_adv;
    adv.select(1, t).copy_(next_adv);
  }
  gae_result r;
  r.returns = adv + values;
  r.advantages = masked_whiten(adv, m);
  return r;
}

policy_loss_result policy_loss(const torch::Tensor& logp, const torch::Tensor& logp_old,
                               const torch::Tensor& advantages, const torch::Tensor& mask,
                               const clip_options& clip, loss_agg agg, double norm_length,
                               const torch::Tensor& weights) {
  if (clip.dual_clip != 0 && !(clip.dual_clip > 1)) throw error("policy_loss: dual_clip must be > 1 (or 0)");
  const auto log_ratio = (logp - logp_old).clamp(-20, 20);
  const auto ratio = torch::exp(log_ratio);
  const auto pg1 = -advantages * ratio;
  const auto pg2 = -advantages * ratio.clamp(1 - clip.eps_low, 1 + clip.eps_high);
  auto loss = torch::maximum(pg1, pg2);
  torch::Tensor dual_taken;
  if (clip.dual_clip > 0) {
    const auto pg3 = -advantages * clip.dual_clip;
    dual_taken = (advantages < 0) & (pg3 < loss);
    loss = torch::where(advantages < 0, torch::minimum(pg3, loss), loss);
  }
  if (weights.defined()) loss = loss * weights;
  policy_loss_result r;
  r.loss = aggregate(loss, mask, agg, norm_length);
  torch::NoGradGuard no_grad;
  const auto m = mask.to(torch::kFloat64);
  const double n = std::max(1.0, m.sum().item<double>());
  r.clipped = pg2 > pg1;
  r.clip_frac = (r.clipped.to(torch::kFloat64) * m).sum().item<double>() / n;
  if (dual_taken.defined()) r.dual_frac = (dual_taken.to(torch::kFloat64) * m).sum().item<double>() / n;
  r.approx_kl = ((-log_ratio).to(torch::kFloat64) * m).sum().item<double>() / n;
  return r;
}

torch::Tensor value_loss(const torch::Tensor& values, const torch::Tensor& values_old,
                         const torch::Tensor& returns, const torch::Tensor& mask, double clip, loss_agg agg,
                         double norm_length) {
  const auto clipped = values_old + (values - values_old).clamp(-clip, clip);
  const auto l1 = (values - returns).pow(2), l2 = (clipped - returns).pow(2);
  return 0.5 * aggregate(torch::maximum(l1, l2), mask, agg, norm_length);
}

torch::Tensor entropy_from_logits(const torch::Tensor& logits) {
  const auto logp = torch::log_softmax(logits, -1);
  return -(logp.exp() * logp).sum(-1);
}

torch::Tensor token_logprobs(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);
}

void kl_controller::update(double kl, int64_t n_steps) {
  if (!(target > 0)) return;
  const double err = std::clamp(kl / target - 1, -0.2, 0.2);
  coef *= 1 + err * double(n_steps) / horizon;
}

}  // namespace moxi::train::rl
