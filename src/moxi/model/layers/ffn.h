// FFN layers (docs/model-spec.md §3.3): the dense SwiGLU MLP of the first layers and the MoE (fp32 sigmoid
// router with correction bias for selection only, routed SwiGLU experts, optional latent MoE, unscaled
// shared experts).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/kernels/ref/moe.h"
#include "moxi/model/arch/blocks.h"
#include "moxi/model/layers/weights.h"

namespace moxi::model {

// w2(SiLU(w1 x) * w3 x) with f32 weights: the dense MLP and the shared experts.
struct swiglu_mlp {
  stacked_linear gate_up;  // gate_proj [F, hidden] then up_proj [F, hidden], one GEMV
  linear down;             // [hidden, F]
  static swiglu_mlp make(linear gate, linear up, linear down);
  void apply(const float* x, float* y, int64_t T) const;  // x, y f32 [T, hidden]
};

// gate, up, down: [F, W], [F, W], [W, F] with W the expert width (latent or hidden).
using routed_expert = kernels::expert_weights;

struct moe_weights {
  std::vector<float> router;       // f32 [E, hidden]
  std::vector<float> router_bias;  // f32 [E] e_score_correction_bias
  kernels::ref::RouterConfig route;
  linear latent_down;              // [W, hidden] (latent MoE), or empty
  std::vector<float> latent_norm;  // f32 [W], or empty
  linear latent_up;                // [hidden, W]
  std::vector<routed_expert> experts;  // experts first_expert ... (all of them, or an ep rank's share)
  int64_t first_expert = 0;
  std::optional<swiglu_mlp> shared;  // num_shared_experts fused into one MLP of width F * n_shared
  act_quant expert_act = act_quant::NONE;
  // The layout this rank runs in (expert parallelism over its ep group, the shared experts' tp slices), or
  // null in one process.
  std::shared_ptr<const parallel_layout> parallel;
};

swiglu_mlp load_dense_mlp(weight_loader& ld, const std::string& prefix);  // prefix + ".mlp"
// prefix: "model.layers.{i}.block_sparse_moe" (Kimi) / "model.layers.{i}.mlp" (DeepSeek).
moe_weights load_moe(weight_loader& ld, const std::string& prefix, const arch::ffn_names& names);

// x f32 [T, hidden] (after post_attention_layernorm) -> out f32 [T, hidden].
void moe_forward(const moe_weights& w, const formats::model_config& c, const float* x, int64_t T, float* out,
                 const dump_sink* dump, const std::string& name);

// Activation elements one FFN forward holds at once for `rows` rows on a rank of tp x ep (docs/plan.md
// "Activations"): the dense SwiGLU's gate/up rows; or the MoE's router logits, picks, expert inputs, routed
// outputs, weighted sums and one expert's gate/up rows, then its shared experts' rows. Under expert
// parallelism a rank is counted as routing rows / ep rows locally (the all-to-all records are of that size).
double dense_ffn_work_elems(const formats::model_config& c, int64_t rows, int tp);
double moe_work_elems(const formats::model_config& c, int64_t rows, int tp, int ep);

}  // namespace moxi::model
