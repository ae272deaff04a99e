// The arithmetic of policy-gradient post-training (docs/rl.md gives every formula): advantages (GRPO with
// or without the std division, token-level GAE), the clipped surrogate with separate low/high clip and dual
// clip, the three KL estimators, the clipped value loss, the aggregation of per-token losses, and the
// adaptive KL coefficient. Plain functions over libtorch tensors, so the trainer and the tests share them.
//
// Shapes: per-token tensors are [B, T] (B sequences, T response positions), with `mask` 1 on the tokens the
// policy generated and 0 on padding and on tokens it did not write (tool observations). Semantics follow
// the public reference implementations (verl's core_algos, OpenRLHF, TRL) as described in docs/rl.md.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace moxi::train::rl {

// How per-token losses become one number.
enum class loss_agg {
  token_mean,               // sum over every valid token of the batch / their count (DAPO)
  seq_mean_token_mean,      // mean per sequence, then mean over sequences (the original GRPO)
  seq_mean_token_sum,       // sum per sequence, then mean over sequences
  seq_mean_token_sum_norm,  // sum over every valid token / (sequences x a constant length) (Dr.GRPO)
};
loss_agg parse_loss_agg(const std::string& s);  // "token-mean", ... (throws moxi::error naming the choices)
const char* to_string(loss_agg a);

// KL(pi || ref) estimators on sampled tokens, d = logp - logp_ref (clamped to [-20, 20]):
// k1 = d, k2 = d^2 / 2, k3 = exp(-d) - 1 + d (clamped to [-10, 10]) (Schulman, "Approximating KL").
enum class kl_estimator { k1, k2, k3 };
kl_estimator parse_kl_estimator(const std::string& s);
const char* to_string(kl_estimator k);

// Per-token KL estimate [B, T] (differentiable in logp).
torch::Tensor kl_penalty(const torch::Tensor& logp, const torch::Tensor& logp_ref, kl_estimator k);

// Aggregates a per-token loss [B, T] over `mask`. `norm_length` is the constant of seq_mean_token_sum_norm
// (the response length limit). Sequences without a valid token count in no mean.
torch::Tensor aggregate(const torch::Tensor& loss, const torch::Tensor& mask, loss_agg mode,
                        double norm_length = 1.0);

// GRPO outcome advantages: scores [N] of N samples, group [N] (i64, the prompt each came from). Each score
// minus its group's mean, divided by the group's unbiased std + eps when norm_by_std (Dr.GRPO: not). A group
// of one sample has mean 0 and std 1. Returns [N] (one scalar per sample, broadcast over its tokens).
torch::Tensor grpo_advantages(const torch::Tensor& scores, const torch::Tensor& group, bool norm_by_std,
                              double eps = 1e-6);

// Mean and std over the valid tokens; whitening subtracts the mean (unless shift_mean is false) and divides
// by sqrt(var + 1e-8), with the unbiased variance.
torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& mask, bool shift_mean = true);

struct gae_result {
  torch::Tensor advantages;  // [B, T], whitened over the mask
  torch::Tensor returns;     // [B, T], advantages before whitening + values
};
// Token-level GAE, backwards over positions: delta_t = r_t + gamma V_next - V_t, A_t = delta_t + gamma lam
// A_next, where V_next and A_next are those of the next VALID position (masked positions carry them
// through unchanged, so observations inside a trajectory do not cut the recursion); 0 after the last.
gae_result gae(const torch::Tensor& rewards, const torch::Tensor& values, const torch::Tensor& mask,
               double gamma, double lam);

struct clip_options {
  double eps_low = 0.2, eps_high = 0.2;  // ratio clipped to [1 - eps_low, 1 + eps_high] (DAPO: 0.28 high)
  double dual_clip = 0;  // > 1: for A < 0 the loss is at most -dual_clip * A (Ye et al. 2019); 0 = off
};

struct policy_loss_result {
  torch::Tensor loss;     // aggregated, differentiable
  double clip_frac = 0;   // share of valid tokens where the clipped branch is the one taken
  double dual_frac = 0;   // share of valid tokens where the dual clip bound is the one taken
  double approx_kl = 0;   // mean over valid tokens of logp_old - logp
  torch::Tensor clipped;  // bool [B, T]: the clipped branch was taken (for per-domain clip fractions)
};
// PPO's clipped surrogate per token, -A r against -A clip(r), the larger; ratio r = exp(logp - logp_old)
// with the log-ratio clamped to [-20, 20]. `weights` (optional [B, T]) multiply the per-token loss
// (truncated importance sampling between the rollout engine and the trainer).
policy_loss_result policy_loss(const torch::Tensor& logp, const torch::Tensor& logp_old,
                               const torch::Tensor& advantages, const torch::Tensor& mask,
                               const clip_options& clip, loss_agg agg, double norm_length = 1.0,
                               const torch::Tensor& weights = {});

// PPO's clipped value loss: 0.5 agg(max((v - R)^2, (v_old + clamp(v - v_old, -c, c) - R)^2)).
torch::Tensor value_loss(const torch::Tensor& values, const torch::Tensor& values_old,
                         const torch::Tensor& returns, const torch::Tensor& mask, double clip, loss_agg agg,
                         double norm_length = 1.0);

// Entropy of the distribution at each position: logits [B, T, V] -> [B, T].
torch::Tensor entropy_from_logits(const torch::Tensor& logits);

// Log-probability of each target under logits: logits [B, T, V], targets i64 [B, T] -> [B, T].
torch::Tensor token_logprobs(const torch::Tensor& logits, const torch::Tensor& targets);

// The KL coefficient of "KL in the reward": fixed, or adaptive (Ziegler et al. 2019): after each step with
// measured KL, coef *= 1 + clamp(kl / target - 1, -0.2, 0.2) * n_steps / horizon.
struct kl_controller {
  double coef = 0;
  double target = 0;  // > 0: adaptive
  double horizon = 10000;
  void update(double kl, int64_t n_steps);
};

}  // namespace moxi::train::rl
