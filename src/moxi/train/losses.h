// Training objectives over train_model: next-token cross-entropy plus the MTP loss (weight 0.3),
// DeepSeek-V3's sequence-wise balance loss and aux-loss-free router bias update, and DeepSeek-V3.2's KL
// objective for the lightning indexer.
#pragma once

#include <torch/torch.h>

#include "moxi/train/model.h"

namespace moxi::train {

struct loss_options {
  double mtp_weight = 0.3;      // docs/model-spec.md §3.4
  double balance_alpha = 1e-4;  // sequence-wise balance loss weight ("small", DeepSeek-V3 §2.1.2)
  double indexer_weight = 1.0;  // the KL only reaches the indexer, so its scale is independent
};

struct loss_terms {
  torch::Tensor total;       // what backward() runs on
  torch::Tensor ce;          // next-token cross-entropy (mean over predicted positions)
  torch::Tensor mtp;         // MTP cross-entropy predicting t_{i+2} (0 without MTP layers)
  torch::Tensor balance;     // sum over MoE layers of the sequence-wise balance loss (before alpha)
  torch::Tensor indexer_kl;  // mean over DSA layers of KL(attention || indexer)
  forward_stats stats;       // routing of this step, for update_router_bias
};

// Which positions of a right-padded batch count. Undefined tensors mean "all".
struct token_masks {
  torch::Tensor target;  // f32 [B, T]: 1 where token j is a training target (SFT: the reply and its end
                         // token), 0 for prompt and padding; CE at position i is weighted by target[i+1],
                         // the MTP loss at i by target[i+2]
  torch::Tensor valid;   // bool [B, T]: real tokens (not padding); the balance loss, the router bias
                         // update and the indexer KL read only these
};

// What the losses divide by: the counts of a batch. Data-parallel training (dist.h) passes the counts of the
// global batch (the ranks' counts summed) to each rank's slice, so that each loss term of a slice is its
// share of the global batch's term: the terms and their gradients summed over the ranks are exactly those of
// the whole batch in one process (up to the order of the floating-point sums).
struct batch_counts {
  double ce_targets = 0;   // CE target positions (target[:, 1:])
  double mtp_targets = 0;  // MTP target positions (target[:, 2:])
  double valid = 0;        // valid tokens (the indexer KL of the main model's DSA layers)
  double valid_mtp = 0;    // valid MTP positions (valid[:, 2:]: MTP layers' DSA indexers)
  double rows = 0;         // sequences (the balance loss is a mean over rows)
};
// The counts of one batch (tokens i64 [B, T]; undefined masks count every position).
batch_counts count_batch(const torch::Tensor& tokens, const token_masks& masks);

// tokens i64 [B, T] with T >= 3 when the model has MTP layers. CE and MTP are means over the target
// positions of the whole batch (each target token weighs the same, whatever its row's length).
// media: image rows for the placeholder tokens (train_model::forward), or undefined.
// global: the counts of the global batch this batch is a slice of (data parallelism), or null: this batch.
loss_terms training_loss(const train_model& m, const torch::Tensor& tokens, const loss_options& opts = {},
                         const token_masks& masks = {}, const torch::Tensor& media = {},
                         const batch_counts* global = nullptr);

// DeepSeek-V3 eq. 17-20 for one layer: alpha-free sum_i f_i P_i, averaged over the batch, with
// f_i = E/(K T) * #{t : i in topk(t)} and P_i = mean_t s_it / sum_j s_jt over the T valid tokens of a row
// (`valid` bool [B, T], undefined = all). 1 when perfectly balanced.
torch::Tensor sequence_balance_loss(const torch::Tensor& experts,  // i64 [B, T, K]
                                    const torch::Tensor& scores,   // f32 [B, T, E]
                                    int64_t num_experts, const torch::Tensor& valid = {});

// KL(target || softmax(scores)) over `support`, mean over the valid queries (DeepSeek-V3.2 indexer
// objective; `valid` bool [B, T], undefined = all).
torch::Tensor indexer_kl_loss(const indexer_stats& s, const torch::Tensor& valid = {});

// Aux-loss-free balancing (DeepSeek-V3 §2.1.2): each MoE layer's correction bias moves by `speed` toward
// balance, down for experts above the mean load of the step, up for those below. Loads count the valid
// tokens only (`valid` bool [B, T] of the main sequence, undefined = all). No gradient involved.
void update_router_bias(train_model& m, const forward_stats& stats, double speed = 0.001,
                        const torch::Tensor& valid = {});
// The two halves of update_router_bias, for data parallelism (the ranks sum their loads first): the number
// of valid tokens routed to each expert of one MoE layer (f32 [E]), and the bias move from a load.
torch::Tensor router_load(const moe_stats& s, int64_t num_experts, const torch::Tensor& valid = {});
void move_router_bias(train_model& m, const std::string& bias, const torch::Tensor& load, double speed);

// The valid mask for a stats entry of length `len`: the main model's (len == T) or the MTP head's
// (len == T - 2: position i reads token i + 1 and predicts token i + 2, so it is real iff token i + 2 is).
torch::Tensor valid_for_length(const torch::Tensor& valid, int64_t len);

}  // namespace moxi::train
