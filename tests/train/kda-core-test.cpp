// The trainer's chunkwise KDA core equals the token-by-token recurrence (its definition) in value and in
// gradient, for both gate ranges, lengths that are and are not multiples of the chunk, and several chunk
// sizes; and the model's forward is the same with either form.
#include "moxi/train/kda-core.h"

#include <gtest/gtest.h>

#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/train/model.h"

using namespace moxi;

namespace {

struct inputs {
  torch::Tensor q, k, v, g, beta;
};

// L2-normalized q/k, log decays in [-gmax, 0], beta in (0, 1): what the model feeds the core.
inputs random_inputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, double gmax, uint64_t seed) {
  torch::manual_seed(seed);
  auto l2 = [](const torch::Tensor& t) { return t / t.pow(2).sum(-1, true).sqrt(); };
  inputs in;
  in.q = l2(torch::randn({B, T, H, K})).requires_grad_(true);
  in.k = l2(torch::randn({B, T, H, K})).requires_grad_(true);
  in.v = torch::randn({B, T, H, V}).requires_grad_(true);
  in.g = (-gmax * torch::rand({B, T, H, K})).requires_grad_(true);
  in.beta = torch::sigmoid(torch::randn({B, T, H})).requires_grad_(true);
  return in;
}

std::vector<torch::Tensor> grads(const torch::Tensor& o, const inputs& in, const torch::Tensor& w) {
  return torch::autograd::grad({(o * w).sum()}, {in.q, in.k, in.v, in.g, in.beta});
}

TEST(KdaCore, ChunkedEqualsRecurrentInValueAndGradient) {
  struct cse {
    int64_t T, chunk;
    double gmax;
  };
  // Strong decays (up to -5 per step, the lower-bound gate's range) and mild ones; T below, at and above
  // the chunk size; both forms of the intra-chunk products (factored while -min(g) (C - 1) <= 80).
  for (const auto c :
       {cse{1, 16, 5.0}, cse{16, 16, 0.1}, cse{37, 16, 5.0}, cse{45, 8, 1.0}, cse{70, 64, 0.5},
        // decays too strong for the factored intra-chunk form: the exp-of-differences form
        cse{40, 16, 8.0}, cse{50, 32, 5.0}}) {
    const auto in = random_inputs(2, c.T, 3, 8, 6, c.gmax, uint64_t(c.T));
    const double scale = 1.0 / std::sqrt(8.0);
    const auto ref = train::kda_recurrent(in.q, in.k, in.v, in.g, in.beta, scale);
    const auto got = train::kda_chunked(in.q, in.k, in.v, in.g, in.beta, scale, c.chunk);
    ASSERT_EQ(got.sizes(), ref.sizes());
    EXPECT_LT((got - ref).abs().max().item<double>(), 2e-5) << "T " << c.T << " chunk " << c.chunk;
    const auto w = torch::randn(ref.sizes());
    const auto gr = grads(ref, in, w), gc = grads(got, in, w);
    const char* names[] = {"q", "k", "v", "g", "beta"};
    for (size_t i = 0; i < gr.size(); ++i) {
      const double scale_i = std::max(1.0, gr[i].abs().max().item<double>());
      EXPECT_LT((gc[i] - gr[i]).abs().max().item<double>() / scale_i, 1e-4)
          << "d/d" << names[i] << " T " << c.T << " chunk " << c.chunk;
    }
  }
}

TEST(KdaCore, ModelForwardIsTheSameWithEitherForm) {
  const auto config =
      model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-kimi-linear.json");
  auto m = train::train_model::init(config, 5);
  torch::manual_seed(6);
  const auto tokens = torch::randint(0, config.vocab_size, {2, 41}, torch::kInt64);
  const auto chunked = m.forward(tokens).logits;
  auto o = m.options();
  o.kda_chunk = 0;
  m.set_options(o);
  const auto recurrent = m.forward(tokens).logits;
  EXPECT_LT((chunked - recurrent).abs().max().item<double>(), 1e-4);
}

}  // namespace
