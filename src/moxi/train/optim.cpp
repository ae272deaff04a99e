// AdamW groups, the warmup + cosine schedule and grad-norm clipping (see optim.h).
#include "moxi/train/optim.h"

#include <cmath>
#include <numbers>

#include "moxi/base/error.h"

namespace moxi::train {

double lr_schedule::lr_at(int64_t step) const {
  if (step < warmup) return peak * double(step + 1) / double(warmup);
  const double span = double(std::max<int64_t>(1, total - warmup));
  const double progress = std::min(1.0, double(step - warmup) / span);
  return floor + (peak - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

bool decays(const model::tensor_decl& d) {
  const bool matrix_init = d.init == model::init_kind::NORMAL || d.init == model::init_kind::NORMAL_OUT ||
                           d.init == model::init_kind::CONV;
  return matrix_init && d.group != model::param_group::EMBEDDING && d.shape.size() >= 2;
}

bool trainable(const model::tensor_decl& d) {
  const std::string suffix = "e_score_correction_bias";
  return !(d.name.size() >= suffix.size() &&
           d.name.compare(d.name.size() - suffix.size(), suffix.size(), suffix) == 0);
}

param_groups group_parameters(train_model& m) {
  param_groups g;
  for (const auto& d : m.manifest()) {
    if (!trainable(d)) continue;
    const int i = decays(d) ? 0 : 1;
    g.names[i].push_back(d.name);
    g.params[i].push_back(m.params().at(d.name));
  }
  return g;
}

std::unique_ptr<torch::optim::AdamW> make_adamw(const param_groups& g, const adamw_options& o) {
  auto base = torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (int i = 0; i < 2; ++i) {
    auto opts = std::make_unique<torch::optim::AdamWOptions>(base);
    opts->weight_decay(i == 0 ? o.weight_decay : 0.0);
    groups.emplace_back(g.params[i], std::move(opts));
  }
  return std::make_unique<torch::optim::AdamW>(std::move(groups), base);
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& group : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  // The global norm in double, over the gradients that exist (a parameter the loss never reached has none).
  double sq = 0;
  for (const auto& p : params)
    if (p.grad().defined()) sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  const double norm = std::sqrt(sq);
  if (max_norm > 0 && norm > max_norm) {
    const double scale = max_norm / norm;
    for (const auto& p : params)
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  return norm;
}

}  // namespace moxi::train
