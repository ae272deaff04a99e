// The RL arithmetic (src/moxi/train/rl-core.h) against hand-worked values and fp64 re-derivations written
// here as plain loops, and a two-step bandit whose optimum is known: GRPO and PPO raise its expected reward,
// and a large KL coefficient (in the loss, or in the reward) holds the policy near the reference.
#include "moxi/train/rl-core.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "moxi/base/error.h"

using namespace moxi::train;
namespace F = torch::nn::functional;

namespace {

torch::Tensor d(std::vector<double> v) {
  return torch::tensor(v, torch::kFloat64);
}
torch::Tensor d2(const std::vector<std::vector<double>>& rows) {
  std::vector<torch::Tensor> t;
  for (const auto& r : rows) t.push_back(d(r));
  return torch::stack(t);
}
double at(const torch::Tensor& t, int64_t i, int64_t j) {
  return t.index({i, j}).item<double>();
}

TEST(RlCore, GrpoAdvantagesMatchHandValues) {
  const auto s = d({1, 0, 0, 1, 0.5, 2, 7});
  const auto g = torch::tensor({0, 0, 0, 0, 1, 1, 2}, torch::kInt64);
  // Group 0: mean 0.5, unbiased std sqrt(1/3); group 1: mean 1.25, std sqrt(1.125); group 2: one sample,
  // mean 0 and std 1 by convention.
  const auto a = rl::grpo_advantages(s, g, true, 0);
  const double s0 = std::sqrt(1.0 / 3), s1 = std::sqrt(1.125);
  const std::vector<double> want = {0.5 / s0, -0.5 / s0, -0.5 / s0, 0.5 / s0, -0.75 / s1, 0.75 / s1, 7};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(a[int64_t(i)].item<double>(), want[i], 1e-12) << i;
  // Dr.GRPO: centring only.
  const auto b = rl::grpo_advantages(s, g, false);
  const std::vector<double> want_b = {0.5, -0.5, -0.5, 0.5, -0.75, 0.75, 7};
  for (size_t i = 0; i < want_b.size(); ++i) EXPECT_NEAR(b[int64_t(i)].item<double>(), want_b[i], 1e-12) << i;
  // A group whose rewards are all equal carries no signal.
  const auto z = rl::grpo_advantages(d({1, 1, 1}), torch::zeros({3}, torch::kInt64), true);
  EXPECT_EQ(z.abs().max().item<double>(), 0.0);
}

TEST(RlCore, KlEstimatorsMatchHandValuesAndAreUnbiased) {
  const double l2 = std::log(2.0);
  const auto lp = d({l2}), ref = d({0});
  EXPECT_NEAR(rl::kl_penalty(lp, ref, rl::kl_estimator::k1).item<double>(), l2, 1e-12);
  EXPECT_NEAR(rl::kl_penalty(lp, ref, rl::kl_estimator::k2).item<double>(), 0.5 * l2 * l2, 1e-12);
  EXPECT_NEAR(rl::kl_penalty(lp, ref, rl::kl_estimator::k3).item<double>(), 0.5 - 1 + l2, 1e-12);
  // k3 >= 0 everywhere, k1 may be negative.
  EXPECT_LT(rl::kl_penalty(d({-1}), d({0}), rl::kl_estimator::k1).item<double>(), 0);
  EXPECT_GT(rl::kl_penalty(d({-1}), d({0}), rl::kl_estimator::k3).item<double>(), 0);
  // On a categorical distribution, the expectations of k1 and k3 under pi are exactly KL(pi || ref);
  // k2's is not (it is biased).
  torch::manual_seed(5);
  const auto pi = torch::softmax(torch::randn({50}, torch::kFloat64), 0);
  const auto rf = torch::softmax(torch::randn({50}, torch::kFloat64), 0);
  double kl = 0;
  for (int64_t i = 0; i < 50; ++i) {
    const double p = pi[i].item<double>(), q = rf[i].item<double>();
    kl += p * std::log(p / q);
  }
  const auto lpi = pi.log(), lrf = rf.log();
  auto expect = [&](rl::kl_estimator k) { return (pi * rl::kl_penalty(lpi, lrf, k)).sum().item<double>(); };
  EXPECT_NEAR(expect(rl::kl_estimator::k1), kl, 1e-12);
  EXPECT_NEAR(expect(rl::kl_estimator::k3), kl, 1e-12);
  EXPECT_GT(std::abs(expect(rl::kl_estimator::k2) - kl), 1e-4);
  EXPECT_THROW(rl::parse_kl_estimator("k4"), moxi::error);
}

TEST(RlCore, AggregationModesMatchHandValues) {
  const auto loss = d2({{1, 2, 3}, {4, 9, 9}, {5, 5, 5}});
  const auto mask = d2({{1, 1, 1}, {1, 0, 0}, {0, 0, 0}});  // the third sequence has no valid token
  EXPECT_NEAR(rl::aggregate(loss, mask, rl::loss_agg::token_mean).item<double>(), 10.0 / 4, 1e-12);
  EXPECT_NEAR(rl::aggregate(loss, mask, rl::loss_agg::seq_mean_token_mean).item<double>(), (2.0 + 4) / 2,
              1e-12);
  EXPECT_NEAR(rl::aggregate(loss, mask, rl::loss_agg::seq_mean_token_sum).item<double>(), (6.0 + 4) / 2,
              1e-12);
  EXPECT_NEAR(rl::aggregate(loss, mask, rl::loss_agg::seq_mean_token_sum_norm, 4).item<double>(),
              10.0 / (2 * 4), 1e-12);
  for (const char* n : {"token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"})
    EXPECT_STREQ(rl::to_string(rl::parse_loss_agg(n)), n);
  EXPECT_THROW(rl::parse_loss_agg("mean"), moxi::error);
}

TEST(RlCore, ClippedSurrogateMatchesHandValues) {
  // One token each: ratio r = exp(logp - logp_old).
  const auto lp = d({std::log(1.5), std::log(0.5), std::log(1.5), std::log(5.0), std::log(0.7)});
  const auto old = torch::zeros({5}, torch::kFloat64);
  const auto adv = d({1, 1, -1, -1, -2});
  const auto mask = torch::ones({5}, torch::kFloat64);
  auto per_token = [&](rl::clip_options c) {
    std::vector<double> out;
    for (int64_t i = 0; i < 5; ++i) {
      const auto r = rl::policy_loss(lp.slice(0, i, i + 1).view({1, 1}), old.slice(0, i, i + 1).view({1, 1}),
                                     adv.slice(0, i, i + 1).view({1, 1}),
                                     mask.slice(0, i, i + 1).view({1, 1}), c, rl::loss_agg::token_mean);
      out.push_back(r.loss.item<double>());
    }
    return out;
  };
  // eps 0.2: r 1.5, A 1 -> -1.2 (clipped); r 0.5, A 1 -> max(-0.5, -0.8) = -0.5; r 1.5, A -1 -> 1.5;
  // r 5, A -1 -> 5; r 0.7, A -2 -> max(1.4, 1.6) = 1.6 (clipped from below).
  auto v = per_token({0.2, 0.2, 0});
  const std::vector<double> want = {-1.2, -0.5, 1.5, 5, 1.6};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(v[i], want[i], 1e-12) << i;
  // Clip-higher (DAPO eps_high 0.28) lets a positive-advantage token rise further: -1.28.
  EXPECT_NEAR(per_token({0.2, 0.28, 0})[0], -1.28, 1e-12);
  // Dual clip c = 3 caps the loss of a negative-advantage token at -c A = 3 (r 5), and leaves 1.5 alone.
  v = per_token({0.2, 0.2, 3});
  EXPECT_NEAR(v[3], 3, 1e-12);
  EXPECT_NEAR(v[2], 1.5, 1e-12);
  EXPECT_NEAR(v[4], 1.6, 1e-12);
  const auto all = rl::policy_loss(lp.view({1, 5}), old.view({1, 5}), adv.view({1, 5}), mask.view({1, 5}),
                                   {0.2, 0.2, 3}, rl::loss_agg::token_mean);
  EXPECT_NEAR(all.clip_frac, 2.0 / 5, 1e-12);  // tokens 0 and 4 took the clipped branch
  EXPECT_NEAR(all.dual_frac, 1.0 / 5, 1e-12);  // token 3
  EXPECT_THROW(rl::policy_loss(lp, old, adv, mask, {0.2, 0.2, 0.5}, rl::loss_agg::token_mean), moxi::error);
}

// The surrogate and its aggregation re-derived with scalar loops on random batches, every mode.
TEST(RlCore, SurrogateEqualsScalarRederivation) {
  torch::manual_seed(11);
  const int64_t B = 5, T = 7;
  const auto lp = torch::randn({B, T}, torch::kFloat64) * 0.3;
  const auto old = torch::randn({B, T}, torch::kFloat64) * 0.3;
  const auto adv = torch::randn({B, T}, torch::kFloat64);
  auto mask = (torch::rand({B, T}, torch::kFloat64) > 0.3).to(torch::kFloat64);
  mask.index_put_({2}, 0.0);  // one sequence without tokens
  const double el = 0.2, eh = 0.28, c = 3, L = 9;
  for (auto mode : {rl::loss_agg::token_mean, rl::loss_agg::seq_mean_token_mean,
                    rl::loss_agg::seq_mean_token_sum, rl::loss_agg::seq_mean_token_sum_norm}) {
    const auto got = rl::policy_loss(lp, old, adv, mask, {el, eh, c}, mode, L).loss.item<double>();
    double total = 0, tokens = 0, seq_sum = 0, seq_mean = 0, seqs = 0;
    for (int64_t b = 0; b < B; ++b) {
      double s = 0, n = 0;
      for (int64_t t = 0; t < T; ++t) {
        if (at(mask, b, t) == 0) continue;
        const double r = std::exp(at(lp, b, t) - at(old, b, t)), a = at(adv, b, t);
        double l = std::max(-a * r, -a * std::min(std::max(r, 1 - el), 1 + eh));
        if (a < 0) l = std::min(l, -a * c);
        s += l;
        n += 1;
      }
      if (n == 0) continue;
      total += s;
      tokens += n;
      seq_sum += s;
      seq_mean += s / n;
      seqs += 1;
    }
    double want = 0;
    switch (mode) {
      case rl::loss_agg::token_mean:
        want = total / tokens;
        break;
      case rl::loss_agg::seq_mean_token_mean:
        want = seq_mean / seqs;
        break;
      case rl::loss_agg::seq_mean_token_sum:
        want = seq_sum / seqs;
        break;
      case rl::loss_agg::seq_mean_token_sum_norm:
        want = total / (seqs * L);
        break;
    }
    EXPECT_NEAR(got, want, 1e-12) << rl::to_string(mode);
  }
}

TEST(RlCore, GaeMatchesHandValuesAndScalarRederivation) {
  // gamma = lambda = 1: the return of every position is the sum of the rewards after it.
  const auto r = rl::gae(d2({{0, 0, 1}}), d2({{0.5, 0.2, 0.1}}), d2({{1, 1, 1}}), 1, 1);
  for (int64_t t = 0; t < 3; ++t) EXPECT_NEAR(at(r.returns, 0, t), 1.0, 1e-12);
  // Raw advantages 0.5, 0.8, 0.9 (return minus value), then whitened: mean 0.7333, unbiased std 0.2082.
  const double mean = 2.2 / 3, sd = std::sqrt(((0.5 - mean) * (0.5 - mean) + (0.8 - mean) * (0.8 - mean) +
                                               (0.9 - mean) * (0.9 - mean)) /
                                              2);
  EXPECT_NEAR(at(r.advantages, 0, 0), (0.5 - mean) / sd, 1e-6);
  EXPECT_NEAR(at(r.advantages, 0, 2), (0.9 - mean) / sd, 1e-6);

  // Random rewards, values and masks with holes in the middle (observation tokens), against a loop.
  torch::manual_seed(3);
  const int64_t B = 4, T = 9;
  const double gamma = 0.9, lam = 0.8;
  const auto rw = torch::randn({B, T}, torch::kFloat64), v = torch::randn({B, T}, torch::kFloat64);
  auto m = (torch::rand({B, T}, torch::kFloat64) > 0.35).to(torch::kFloat64);
  m.index_put_({0, 8}, 1.0);
  const auto g = rl::gae(rw, v, m, gamma, lam);
  std::vector<double> raw;
  for (int64_t b = 0; b < B; ++b) {
    // Only valid positions take part: their rewards, values, and the chain from one valid position to the
    // next valid one; a masked position reports the advantage of the next valid one (0 after the last).
    double next_v = 0, next_a = 0;
    std::vector<double> adv(static_cast<size_t>(T));
    for (int64_t t = T - 1; t >= 0; --t) {
      if (at(m, b, t) != 0) {
        const double delta = at(rw, b, t) + gamma * next_v - at(v, b, t);
        next_a = delta + gamma * lam * next_a;
        next_v = at(v, b, t);
      }
      adv[size_t(t)] = next_a;
    }
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_NEAR(at(g.returns, b, t), adv[size_t(t)] + at(v, b, t), 1e-12) << b << "," << t;
      if (at(m, b, t) != 0) raw.push_back(adv[size_t(t)]);
    }
  }
  double mu = 0, var = 0;
  for (double x : raw) mu += x;
  mu /= double(raw.size());
  for (double x : raw) var += (x - mu) * (x - mu);
  var /= double(raw.size() - 1);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      if (at(m, b, t) == 0) continue;
      EXPECT_NEAR(at(g.advantages, b, t), (at(g.returns, b, t) - at(v, b, t) - mu) / std::sqrt(var + 1e-8),
                  1e-9);
    }
  }
}

TEST(RlCore, ValueLossAndEntropyAndKlControllerMatchHandValues) {
  // v 1, v_old 0, R 2, clip 0.5: unclipped (1-2)^2 = 1, clipped (0.5-2)^2 = 2.25 -> 0.5 * 2.25.
  EXPECT_NEAR(rl::value_loss(d2({{1}}), d2({{0}}), d2({{2}}), d2({{1}}), 0.5, rl::loss_agg::token_mean)
                  .item<double>(),
              1.125, 1e-12);
  // Uniform over 4: entropy ln 4; log-prob of any token -ln 4.
  const auto logits = torch::zeros({1, 1, 4}, torch::kFloat64);
  EXPECT_NEAR(rl::entropy_from_logits(logits).item<double>(), std::log(4.0), 1e-12);
  EXPECT_NEAR(rl::token_logprobs(logits, torch::tensor({{2}}, torch::kInt64)).item<double>(), -std::log(4.0),
              1e-12);
  rl::kl_controller k{0.1, 0.05, 100};
  k.update(0.5, 10);  // KL 10x the target: the error is capped at +0.2
  EXPECT_NEAR(k.coef, 0.1 * (1 + 0.2 * 10 / 100), 1e-15);
  k.update(0.05 * 0.9, 10);  // 10 % under the target: -0.1
  EXPECT_NEAR(k.coef, 0.1 * 1.02 * (1 - 0.1 * 10 / 100), 1e-15);
  rl::kl_controller fixed{0.1, 0, 100};
  fixed.update(5, 10);
  EXPECT_EQ(fixed.coef, 0.1);
}

// ---- a two-step bandit ---------------------------------------------------------------------------------
// A "response" is two tokens a, b from K; the policy is tabular, pi(a) pi(b | a), and the reward R[a][b] is
// known, so the expected reward and KL(pi || ref) are exact sums over the K^2 sequences.
struct bandit {
  static constexpr int64_t K = 4;
  torch::Tensor l1, l2;      // logits [K], [K, K] (trainable)
  torch::Tensor ref1, ref2;  // the reference's (frozen)
  torch::Tensor v1, v2;      // PPO's value table: before the first token [1], after token a [K]
  torch::Tensor reward;      // [K, K]
  bandit() {
    torch::manual_seed(2);
    ref1 = torch::randn({K}, torch::kFloat64) * 0.5;
    ref2 = torch::randn({K, K}, torch::kFloat64) * 0.5;
    l1 = ref1.clone().requires_grad_(true);
    l2 = ref2.clone().requires_grad_(true);
    v1 = torch::zeros({1}, torch::kFloat64).requires_grad_(true);
    v2 = torch::zeros({K}, torch::kFloat64).requires_grad_(true);
    reward = torch::rand({K, K}, torch::kFloat64) * 0.6;
    reward.index_put_({1, 3}, 1.0);  // the unique best sequence
  }
  torch::Tensor joint(const torch::Tensor& a1, const torch::Tensor& a2) const {
    return torch::softmax(a1, 0).unsqueeze(1) * torch::softmax(a2, 1);
  }
  double expected_reward() const {
    torch::NoGradGuard g;
    return (joint(l1, l2) * reward).sum().item<double>();
  }
  double kl_to_ref() const {
    torch::NoGradGuard g;
    const auto p = joint(l1, l2), q = joint(ref1, ref2);
    return (p * (p.log() - q.log())).sum().item<double>();
  }
  // N sampled sequences [N, 2].
  torch::Tensor sample(int64_t n) const {
    torch::NoGradGuard g;
    const auto a = torch::multinomial(torch::softmax(l1, 0), n, true);
    const auto b = torch::multinomial(torch::softmax(l2, 1).index_select(0, a), 1, true).squeeze(1);
    return torch::stack({a, b}, 1);
  }
  // Log-probs [N, 2] of the sequences under logits (a1, a2).
  static torch::Tensor logp(const torch::Tensor& a1, const torch::Tensor& a2, const torch::Tensor& seq) {
    const auto a = seq.select(1, 0), b = seq.select(1, 1);
    const auto lp1 = torch::log_softmax(a1, 0).index_select(0, a);
    const auto lp2 = torch::log_softmax(a2, 1).index_select(0, a).gather(1, b.unsqueeze(1)).squeeze(1);
    return torch::stack({lp1, lp2}, 1);
  }
  torch::Tensor scores(const torch::Tensor& seq) const {
    return reward.index({seq.select(1, 0), seq.select(1, 1)});
  }
};

// GRPO on the bandit: `prompts` groups of G samples per step, a KL loss (k3) of weight kl_coef.
bandit run_grpo(double kl_coef, int64_t steps) {
  bandit bd;
  torch::optim::Adam opt({bd.l1, bd.l2}, torch::optim::AdamOptions(0.05));
  const int64_t G = 8, prompts = 4;
  for (int64_t s = 0; s < steps; ++s) {
    const auto seq = bd.sample(G * prompts);
    const auto group = torch::arange(prompts).repeat_interleave(G);
    const auto adv = rl::grpo_advantages(bd.scores(seq), group, true).unsqueeze(1).expand({-1, 2});
    const auto old = bandit::logp(bd.l1, bd.l2, seq).detach();
    const auto mask = torch::ones({G * prompts, 2}, torch::kFloat64);
    for (int epoch = 0; epoch < 2; ++epoch) {
      const auto lp = bandit::logp(bd.l1, bd.l2, seq);
      auto loss = rl::policy_loss(lp, old, adv, mask, {0.2, 0.28, 3}, rl::loss_agg::token_mean).loss;
      if (kl_coef > 0) {
        const auto ref = bandit::logp(bd.ref1, bd.ref2, seq);
        loss = loss + kl_coef * rl::aggregate(rl::kl_penalty(lp, ref, rl::kl_estimator::k3), mask,
                                              rl::loss_agg::token_mean);
      }
      opt.zero_grad();
      loss.backward();
      opt.step();
    }
  }
  return bd;
}

// PPO with the value table and token-level GAE; KL to the reference in the reward (k1) with coefficient beta.
bandit run_ppo(double beta, int64_t steps) {
  bandit bd;
  torch::optim::Adam opt({bd.l1, bd.l2}, torch::optim::AdamOptions(0.05));
  torch::optim::Adam vopt({bd.v1, bd.v2}, torch::optim::AdamOptions(0.1));
  const int64_t N = 32;
  const auto mask = torch::ones({N, 2}, torch::kFloat64);
  for (int64_t s = 0; s < steps; ++s) {
    const auto seq = bd.sample(N);
    const auto old = bandit::logp(bd.l1, bd.l2, seq).detach();
    const auto ref = bandit::logp(bd.ref1, bd.ref2, seq).detach();
    auto rewards = -beta * rl::kl_penalty(old, ref, rl::kl_estimator::k1);
    rewards.select(1, 1).add_(bd.scores(seq));
    auto values_of = [&] {
      return torch::stack({bd.v1.expand({N}), bd.v2.index_select(0, seq.select(1, 0))}, 1);
    };
    const auto values_old = values_of().detach();
    const auto g = rl::gae(rewards, values_old, mask, 1.0, 0.95);
    for (int epoch = 0; epoch < 2; ++epoch) {
      const auto lp = bandit::logp(bd.l1, bd.l2, seq);
      const auto loss =
          rl::policy_loss(lp, old, g.advantages, mask, {0.2, 0.2, 0}, rl::loss_agg::token_mean).loss;
      const auto vl = rl::value_loss(values_of(), values_old, g.returns, mask, 0.5, rl::loss_agg::token_mean);
      opt.zero_grad();
      vopt.zero_grad();
      (loss + vl).backward();
      opt.step();
      vopt.step();
    }
  }
  return bd;
}

TEST(RlBandit, GrpoRaisesTheExpectedReward) {
  torch::manual_seed(7);
  const double before = bandit().expected_reward();
  const auto bd = run_grpo(0, 150);
  EXPECT_GT(bd.expected_reward(), 0.9) << "from " << before;  // the optimum is 1.0 (sequence 1, 3)
  EXPECT_LT(before, 0.5);
}

TEST(RlBandit, PpoWithGaeRaisesTheExpectedReward) {
  torch::manual_seed(7);
  const double before = bandit().expected_reward();
  const auto bd = run_ppo(0, 150);
  EXPECT_GT(bd.expected_reward(), 0.9) << "from " << before;
}

TEST(RlBandit, ALargeKlCoefficientHoldsThePolicyNearTheReference) {
  torch::manual_seed(7);
  const auto free_grpo = run_grpo(0, 150);
  torch::manual_seed(7);
  const auto held_grpo = run_grpo(5, 150);
  EXPECT_GT(free_grpo.kl_to_ref(), 1.0);
  EXPECT_LT(held_grpo.kl_to_ref(), 0.1 * free_grpo.kl_to_ref());
  torch::manual_seed(7);
  const auto free_ppo = run_ppo(0, 150);
  torch::manual_seed(7);
  const auto held_ppo = run_ppo(2, 150);
  EXPECT_GT(free_ppo.kl_to_ref(), 1.0);
  EXPECT_LT(held_ppo.kl_to_ref(), 0.1 * free_ppo.kl_to_ref());
  // Held, the policy still improves on the reference a little (the KL trades reward for closeness).
  EXPECT_GT(held_grpo.expected_reward(), bandit().expected_reward());
}

}  // namespace
