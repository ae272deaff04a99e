// The architecture registry: the only place that switches on model_type (ARCHITECTURE.md §1).
#pragma once

#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/arch/blocks.h"
#include "moxi/model/manifest.h"

namespace moxi::model::arch {

// Where the forward pass finds one decoder layer (main or MTP) in the checkpoint and what it computes.
struct layer_layout {
  std::string prefix;       // "model.layers.3"; attention under prefix + ".self_attn"
  formats::attn_kind attn;  // KDA or MLA (Gated DSA when config.dsa is set)
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

struct architecture {
  const char* name;         // "kimi_linear" (the seed family), "deepseek_v3"
  const char* description;
  std::vector<tensor_decl> (*manifest)(const formats::model_config&);
  model_layout (*layout)(const formats::model_config&);
};

// The architecture serving config.model_type; throws naming the model type when none does.
const architecture& find_architecture(const formats::model_config& config);

std::vector<tensor_decl> kimi_linear_manifest(const formats::model_config& config);
std::vector<tensor_decl> deepseek_v3_manifest(const formats::model_config& config);
model_layout kimi_linear_layout(const formats::model_config& config);
model_layout deepseek_v3_layout(const formats::model_config& config);

}  // namespace moxi::model::arch
