// Training objectives of issue 4 over train_model: next-token cross-entropy plus the MTP loss (weight 0.3),
// DeepSeek-V3's sequence-wise balance loss and aux-loss-free router bias update, and DeepSeek-V3.2's KL
// objective for the lightning indexer.
#pragma once

#include <torch/torch.h>

#include "moxi/train/model.h"

namespace moxi::train {

struct loss_options {
  double mtp_weight = 0.3;      // MODEL.md §3.4
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

// tokens i64 [B, T] with T >= 3 when the model has MTP layers.
loss_terms training_loss(const train_model& m, const torch::Tensor& tokens, const loss_options& opts = {});

// DeepSeek-V3 eq. 17-20 for one layer: alpha-free sum_i f_i P_i, averaged over the batch, with
// f_i = E/(K T) * #{t : i in topk(t)} and P_i = mean_t s_it / sum_j s_jt. 1 when perfectly balanced.
torch::Tensor sequence_balance_loss(const torch::Tensor& experts,  // i64 [B, T, K]
                                    const torch::Tensor& scores,   // f32 [B, T, E]
                                    int64_t num_experts);

// KL(target || softmax(scores)) over `support`, mean over queries (DeepSeek-V3.2 indexer objective).
torch::Tensor indexer_kl_loss(const indexer_stats& s);

// Aux-loss-free balancing (DeepSeek-V3 §2.1.2): each MoE layer's correction bias moves by `speed` toward
// balance, down for experts above the mean load of the step, up for those below. No gradient involved.
void update_router_bias(train_model& m, const forward_stats& stats, double speed = 0.001);

}  // namespace moxi::train
