// The seed family (Kimi-Linear-style hybrid): KDA layers, (Gated DSA | MLA) layers and optionally
// sliding-window attention layers (config layer_types), MoE with shared
// experts and optional latent MoE, MTP layers and an optional MoonViT tower. Tensor names follow
// Kimi-Linear's HF checkpoint (model.layers.{i}.self_attn.*, block_sparse_moe.experts.{e}.w1/w2/w3).
#include "moxi/model/arch/blocks.h"
#include "moxi/model/arch/registry.h"

namespace moxi::model::arch {

std::vector<tensor_decl> kimi_linear_manifest(const formats::model_config& c) {
  manifest_builder b(c);
  b.decoder(kimi_linear_layout(c));
  if (c.vision) b.vision_tower();
  return b.take();
}

// Each layer's attention kind and whether it is MoE, and the MoE names; the manifest and the loader both
// read it. MTP layers use full attention (MLA/DSA) when the model has any, else KDA, and the model's FFN
// (memory/cache-spec.cpp repeats this rule).
model_layout kimi_linear_layout(const formats::model_config& c) {
  model_layout l;
  l.ffn = {"block_sparse_moe", "w1", "w3", "w2"};
  for (int64_t i = 0; i < c.num_layers; ++i)
    l.layers.push_back({"model.layers." + std::to_string(i), c.layer_attn[size_t(i)], c.is_moe(i)});
  for (int64_t k = 0; k < c.num_mtp_layers; ++k)
    l.mtp_layers.push_back({"model.layers." + std::to_string(c.num_layers + k),
                            c.mla ? formats::attn_kind::MLA : formats::attn_kind::KDA,
                            c.moe.num_experts > 0});
  return l;
}

}  // namespace moxi::model::arch
