// The trainer's model: the architecture of docs/model-spec.md §3 as differentiable libtorch ops on parameters
// named exactly like the engine's checkpoint tensors (the manifest of arch/), so the trainer loads what the
// engine serves and writes what it loads. Semantics follow docs/model.md choice for choice; the golden test
// (tests/train/golden-test.cpp) holds the logits equal to the engine's.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/arch/registry.h"
#include "moxi/model/manifest.h"
#include "moxi/model/vision.h"
#include "moxi/tensor/dtype.h"

namespace moxi::train {

struct train_options {
  // QAT: fake-quantize routed-expert weights to MXFP4 in the forward (straight-through backward). MXFP8
  // activation fake-quant of the expert GEMM inputs follows quantization_config, and Gated DSA index keys are
  // always rounded to FP8, as in the engine.
  bool qat = false;
  // DSA dense warm-up (DeepSeek-V3.2): attention stays dense while the indexer learns to match it.
  bool dsa_dense = false;
  // KDA core: chunks of this many tokens (the WY / UT-transform form), or 0 for the token-by-token
  // recurrence. Both compute the same function; chunks are much faster on CPU.
  int64_t kda_chunk = 16;
};

// Named intermediates, the engine's dump names (docs/model.md), each [B, T, ...] as float.
using dump_map = std::map<std::string, torch::Tensor>;

// Routing decisions of one MoE layer (what the aux-free bias update and the balance loss read).
struct moe_stats {
  std::string bias;       // name of the layer's e_score_correction_bias parameter
  torch::Tensor experts;  // i64 [B, T, top_k]
  torch::Tensor scores;   // f32 [B, T, E] unbiased sigmoid scores (differentiable)
};

// What the DSA indexer's KL objective (DeepSeek-V3.2) reads from one Gated DSA layer.
struct indexer_stats {
  torch::Tensor scores;   // f32 [B, T, S] index scores, -inf outside the causal window; gradient reaches
                          // only the indexer (its inputs are detached from the main model)
  torch::Tensor target;   // f32 [B, T, S] main attention summed over heads, L1-normalized (detached)
  torch::Tensor support;  // bool [B, T, S] positions the attention used (top-k, or all causal when dense)
};

// Side outputs of a forward pass for the training losses.
struct forward_stats {
  std::vector<moe_stats> moe;
  std::vector<indexer_stats> indexer;
};

// How save() stores the parameters.
struct save_options {
  // Routed experts as real MXFP4 (blocks + scales) when the config quantizes them; false keeps them F32
  // (training checkpoints keep the exact master weights; their config.json then declares no quantization).
  bool mxfp4_experts = true;
  dtype float_type = dtype::F32;  // every other tensor: F32 or BF16 (round to nearest even)
};

class train_model {
 public:
  // Parameters shaped by the manifest, zero-filled (load() or an initializer fills them).
  explicit train_model(formats::model_config config, train_options opts = {});
  // dir holds config.json and the checkpoint; the second form reads a checkpoint under a given config.
  static train_model load(const std::string& dir, train_options opts = {});
  static train_model load(formats::model_config config, const std::string& checkpoint_path,
                          train_options opts = {});
  // Random initial values: the engine's initializer (moxi::model::init_values, the same per-tensor streams
  // as `moxi init --seed`), so a trainer run from a config starts from what `moxi init` would write.
  static train_model init(formats::model_config config, uint64_t seed, train_options opts = {});
  // Writes config.json and one safetensors checkpoint in the engine's layout (see save_options).
  void save(const std::string& out_dir, const save_options& opts = {}) const;

  struct output {
    torch::Tensor logits;  // f32 [B, T, vocab]
    torch::Tensor hidden;  // f32 [B, T, hidden] after the final norm (what the MTP head reads)
  };
  // tokens i64 [B, T] (positions 0..T-1, no cache: training runs whole sequences). media (optional) f32
  // [n, hidden]: rows that replace the embeddings of the n image placeholder tokens (config
  // media_placeholder_token_id) in row-major [B, T] order, as the engine's forward_options::media.
  output forward(const torch::Tensor& tokens, dump_map* dump = nullptr, forward_stats* stats = nullptr,
                 const torch::Tensor& media = {}) const;
  // The vision encoder + projector (train/vision.h) on this model's parameters: f32 [n, hidden].
  torch::Tensor encode_images(std::span<const model::image_input> images, dump_map* dump = nullptr) const;
  // MTP depth k: h' = Block(eh_proj([enorm(emb(t_{i+1})) ; hnorm(h_i)])) -> shared_head.norm -> lm_head.
  // hidden f32 [B, T, hidden], next_tokens i64 [B, T]; logits f32 [B, T, vocab] predicting t_{i+2}.
  torch::Tensor mtp_forward(const torch::Tensor& hidden, const torch::Tensor& next_tokens, int64_t depth = 0,
                            dump_map* dump = nullptr, forward_stats* stats = nullptr) const;

  const formats::model_config& config() const { return config_; }
  // Every parameter by checkpoint name (routed experts by their logical ".weight" name, dequantized).
  std::map<std::string, torch::Tensor>& params() { return params_; }
  const std::map<std::string, torch::Tensor>& params() const { return params_; }
  // The manifest the parameters follow (the vision tower's too, when the config has one).
  const std::vector<model::tensor_decl>& manifest() const { return manifest_; }
  const train_options& options() const { return opts_; }
  // Switches QAT / DSA dense warm-up between phases of a run.
  void set_options(const train_options& opts) { opts_ = opts; }

 private:
  const torch::Tensor& p(const std::string& name) const;
  torch::Tensor lin(const torch::Tensor& x, const std::string& prefix) const;  // x W^T, W = prefix.weight
  torch::Tensor rms(const torch::Tensor& x, const std::string& weight) const;
  torch::Tensor block(const torch::Tensor& h, const model::arch::layer_layout& lay, const std::string& name,
                      dump_map* dump, forward_stats* stats) const;
  torch::Tensor kda(const torch::Tensor& x, const std::string& prefix, const std::string& name,
                    dump_map* dump) const;
  torch::Tensor mla(const torch::Tensor& x, const std::string& prefix, const std::string& name,
                    dump_map* dump, forward_stats* stats) const;
  torch::Tensor swa(const torch::Tensor& x, const std::string& prefix, const std::string& name,
                    dump_map* dump) const;
  torch::Tensor moe(const torch::Tensor& x, const std::string& prefix, const std::string& name,
                    dump_map* dump, forward_stats* stats) const;
  torch::Tensor mlp(const torch::Tensor& x, const std::string& prefix) const;
  torch::Tensor head(const torch::Tensor& h) const;

  formats::model_config config_;
  train_options opts_;
  model::arch::model_layout layout_;
  std::vector<model::tensor_decl> manifest_;
  std::map<std::string, torch::Tensor> params_;
};

}  // namespace moxi::train
