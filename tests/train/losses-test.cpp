// The training objectives: CE + 0.3 MTP, the sequence-wise balance loss, the aux-loss-free bias
// update and the indexer KL, on a random tiny-seed checkpoint: values on constructed inputs, which
// parameters each term trains, and that a few Adam steps (QAT on) fit a short sequence.
#include "moxi/train/losses.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/train/model.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

// A tiny-seed checkpoint (KDA + Gated DSA, latent MoE, MXFP4 experts, MTP) made once per process.
const std::string& seed_checkpoint() {
  static const std::string dir = [] {
    std::string t = (fs::temp_directory_path() / "moxi-losses-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp");
    model::init_options o;
    o.seed = 3;
    o.float_type = dtype::F32;
    o.show_progress = false;
    model::init_checkpoint(model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json"),
                           t + "/ckpt", o);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(fs::path(seed_checkpoint()).parent_path(), ec);
    });
    return t + "/ckpt";
  }();
  return dir;
}

torch::Tensor tokens_of(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, vocab, {B, T}, torch::kInt64);
}

double grad_sum(const train::train_model& m, const std::string& needle) {
  double s = 0;
  for (const auto& [name, p] : m.params())
    if (name.find(needle) != std::string::npos && p.grad().defined())
      s += p.grad().abs().sum().item<double>();
  return s;
}

TEST(Losses, BalanceLossIsOneWhenUniformAndLargerWhenSkewed) {
  // 4 experts, top-1, 4 tokens: each expert once, uniform scores -> f = 1, P = 1/4 -> 1.
  const auto uniform = torch::arange(4).view({1, 4, 1});
  const auto s = torch::full({1, 4, 4}, 0.5f);
  EXPECT_NEAR(train::sequence_balance_loss(uniform, s, 4).item<double>(), 1.0, 1e-6);
  // Everything on expert 0 with scores favouring it: f_0 = 4, P_0 > 1/4.
  const auto skewed = torch::zeros({1, 4, 1}, torch::kInt64);
  auto s2 = torch::full({1, 4, 4}, 0.1f);
  s2.select(2, 0).fill_(0.9f);
  EXPECT_GT(train::sequence_balance_loss(skewed, s2, 4).item<double>(), 2.0);
}

TEST(Losses, TotalIsCePlusPointThreeMtpAndEachTermTrainsItsParameters) {
  auto m = train::train_model::load(seed_checkpoint());
  const auto tokens = tokens_of(2, 20, m.config().vocab_size, 1);
  train::loss_options o;
  auto r = train::training_loss(m, tokens, o);
  EXPECT_GT(r.mtp.item<double>(), 0.0);
  EXPECT_GT(r.indexer_kl.item<double>(), 0.0);
  EXPECT_EQ(r.stats.indexer.size(), 3u);  // the two Gated DSA layers and the MTP block's
  EXPECT_NEAR(r.total.item<double>(),
              (r.ce + 0.3 * r.mtp + o.balance_alpha * r.balance + r.indexer_kl).item<double>(), 1e-6);

  // The KL alone trains the indexer and nothing else (its inputs are detached).
  r.indexer_kl.backward();
  EXPECT_GT(grad_sum(m, ".indexer."), 0.0);
  for (const auto& [name, p] : m.params())
    if (name.find(".indexer.") == std::string::npos && p.grad().defined()) {
      EXPECT_EQ(p.grad().abs().sum().item<double>(), 0.0) << name;
    }

  // The language-model loss never reaches the indexer, but reaches experts, router and attention.
  for (auto& [name, p] : m.params()) p.mutable_grad() = torch::Tensor();
  auto r2 = train::training_loss(m, tokens, o);
  (r2.ce + 0.3 * r2.mtp + o.balance_alpha * r2.balance).backward();
  EXPECT_EQ(grad_sum(m, ".indexer."), 0.0);
  EXPECT_GT(grad_sum(m, ".experts."), 0.0);
  EXPECT_GT(grad_sum(m, ".gate.weight"), 0.0);
  EXPECT_GT(grad_sum(m, ".kv_b_proj"), 0.0);
  EXPECT_GT(grad_sum(m, ".A_log"), 0.0);
  EXPECT_GT(grad_sum(m, ".eh_proj"), 0.0);
}

TEST(Losses, RouterBiasMovesTowardBalance) {
  auto m = train::train_model::load(seed_checkpoint());
  const auto tokens = tokens_of(1, 16, m.config().vocab_size, 2);
  auto r = train::training_loss(m, tokens);
  ASSERT_FALSE(r.stats.moe.empty());
  const auto& s = r.stats.moe.front();
  const auto before = m.params().at(s.bias).detach().clone();
  train::update_router_bias(m, r.stats, 0.001);
  const auto delta = m.params().at(s.bias).detach() - before;
  const int64_t E = m.config().moe.num_experts;
  const auto flat = s.experts.reshape({-1});
  const auto load = torch::zeros({E}).scatter_add(0, flat, torch::ones_like(flat, torch::kFloat32));
  const double mean = load.mean().item<double>();
  for (int64_t e = 0; e < E; ++e) {
    const double l = load[e].item<double>(), d = delta[e].item<double>();
    if (l > mean) {
      EXPECT_NEAR(d, -0.001, 1e-7) << "expert " << e;
    } else if (l < mean) {
      EXPECT_NEAR(d, 0.001, 1e-7) << "expert " << e;
    }
  }
}

TEST(Losses, AdamStepsWithQatFitAShortSequence) {
  train::train_options qo;
  qo.qat = true;
  auto m = train::train_model::load(seed_checkpoint(), qo);
  const auto tokens = tokens_of(1, 16, m.config().vocab_size, 3);
  std::vector<torch::Tensor> params;
  for (auto& [name, p] : m.params()) params.push_back(p);
  torch::optim::Adam opt(params, torch::optim::AdamOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    opt.zero_grad();
    auto r = train::training_loss(m, tokens);
    r.total.backward();
    opt.step();
    train::update_router_bias(m, r.stats);
    (step == 0 ? first : last) = r.ce.item<double>();
  }
  EXPECT_LT(last, first * 0.8) << "first " << first << " last " << last;
}

}  // namespace
