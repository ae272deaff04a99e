// The optimizer side of SFT: AdamW over two parameter groups (weight decay on matrices only), the learning
// rate schedule (linear warmup, then cosine decay), and global grad-norm clipping.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moxi/train/model.h"

namespace moxi::train {

// Linear warmup from peak/warmup to peak over `warmup` steps, then cosine from peak to `floor` at step
// `total` (and `floor` after it). Step s (0-based) uses lr_at(s):
//   s < warmup:  peak * (s + 1) / warmup
//   otherwise:   floor + (peak - floor) * (1 + cos(pi * min(1, (s - warmup) / max(1, total - warmup)))) / 2
struct lr_schedule {
  double peak = 1e-3, floor = 0;
  int64_t warmup = 0, total = 1;
  double lr_at(int64_t step) const;
};

// Whether a parameter gets weight decay: 2-D+ weights of linear maps and convolutions do; norms, biases,
// embeddings, KDA's A_log / dt_bias and 1-D vectors do not. The router's e_score_correction_bias is not
// optimized at all (the aux-free update moves it): see trainable().
bool decays(const model::tensor_decl& d);
bool trainable(const model::tensor_decl& d);

// The parameters in the order the optimizer holds them (manifest order), split into the decayed group 0
// and the undecayed group 1. Names parallel to the tensors.
struct param_groups {
  std::vector<std::string> names[2];
  std::vector<torch::Tensor> params[2];
};
param_groups group_parameters(train_model& m);

struct adamw_options {
  double lr = 1e-3, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};
std::unique_ptr<torch::optim::AdamW> make_adamw(const param_groups& g, const adamw_options& o);
void set_lr(torch::optim::Optimizer& opt, double lr);

// Scales all gradients so that their global L2 norm is at most max_norm (0: no clipping); returns the
// norm before clipping.
double clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace moxi::train
