// Declaration helpers shared by the architecture files: the tensors of an MLA/DSA attention block, a
// KDA block, an MoE or dense FFN and an MTP head, under a per-architecture naming scheme.
#pragma once

#include <string>
#include <vector>

#include "moxi/formats/model-config.h"

#include "moxi/model/manifest.h"

namespace moxi::model::arch {

// How an architecture names its FFN tensors.
struct ffn_names {
  std::string moe_prefix;                 // "block_sparse_moe" (Kimi) or "mlp" (DeepSeek)
  std::string expert_gate, expert_up, expert_down;  // "w1","w3","w2" or "gate_proj","up_proj","down_proj"
};

// Where the forward pass finds one decoder layer (main or MTP) in the checkpoint and what it computes.
struct layer_layout {
  std::string prefix;       // "model.layers.3"; attention under prefix + ".self_attn"
  formats::attn_kind attn;  // KDA, MLA (Gated DSA when config.dsa is set) or SWA
  bool moe = false;         // MoE FFN under prefix + "." + ffn.moe_prefix, else the dense prefix + ".mlp"
};

// The names and per-layer structure the model loader reads (model/model.cpp); the manifest of the same
// architecture declares exactly these tensors (tested in tests/model/forward-test.cpp).
struct model_layout {
  std::string embed = "model.embed_tokens.weight";
  std::string final_norm = "model.norm.weight";
  std::string lm_head = "lm_head.weight";  // unused when tie_word_embeddings
  ffn_names ffn;
  std::vector<layer_layout> layers;      // num_layers
  std::vector<layer_layout> mtp_layers;  // num_mtp_layers; each also has enorm, hnorm, eh_proj, shared_head
};

class manifest_builder {
 public:
  explicit manifest_builder(const formats::model_config& c) : c_(c) {}

  tensor_decl& add(std::string name, std::vector<int64_t> shape, param_group group, init_kind init,
                   int64_t layer = -1);
  // A Linear weight [out, in] ("<prefix>.weight"); Linear weights are FP8-eligible.
  tensor_decl& linear(const std::string& prefix, int64_t out, int64_t in, param_group group, int64_t layer,
                      bool writes_residual = false);
  tensor_decl& norm(const std::string& prefix, int64_t dim, param_group group, int64_t layer);

  void kda_block(const std::string& p, int64_t layer, param_group group);
  void mla_block(const std::string& p, int64_t layer, param_group group);
  void swa_block(const std::string& p, int64_t layer, param_group group);
  // MoE FFN when moe_layer, else the dense MLP; `override_group` (MTP) replaces every group when set.
  void ffn_block(const std::string& p, int64_t layer, bool moe_layer, const ffn_names& names,
                 const param_group* override_group = nullptr);
  void vision_tower();

  // Embedding, every decoder layer of `layout`, final norm, lm_head (unless tied) and the MTP layers
  // (DeepSeek-V3 layout, docs/deepseek.md §E.1: enorm, hnorm, eh_proj, a decoder block and
  // shared_head.norm; embedding and lm_head are shared with the main model and not stored again).
  void decoder(const model_layout& layout);

  std::vector<tensor_decl> take() { return std::move(out_); }
  const formats::model_config& config() const { return c_; }

 private:
  const formats::model_config& c_;
  std::vector<tensor_decl> out_;
};

}  // namespace moxi::model::arch
