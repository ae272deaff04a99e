// DeepSeek-V3 / V3.2: every layer MLA (DSA with the lightning indexer in V3.2) with YaRN RoPE, grouped
// sigmoid routing, dense first layers and an MTP layer. Names follow the HF checkpoints
// (model.layers.{i}.mlp.experts.{e}.gate_proj/up_proj/down_proj, docs/deepseek.md §B.2, §E.1).
#include "moxi/model/arch/blocks.h"
#include "moxi/model/arch/registry.h"

namespace moxi::model::arch {

std::vector<tensor_decl> deepseek_v3_manifest(const formats::model_config& c) {
  // DeepSeek's released checkpoints also repeat embed_tokens and shared_head.head inside the MTP layer;
  // moxi shares them with the main model and does not store them twice.
  manifest_builder b(c);
  b.decoder(deepseek_v3_layout(c));
  return b.take();
}

// Every layer MLA (DSA with the indexer fields); the manifest and the loader both read it.
model_layout deepseek_v3_layout(const formats::model_config& c) {
  model_layout l;
  l.ffn = {"mlp", "gate_proj", "up_proj", "down_proj"};
  for (int64_t i = 0; i < c.num_layers; ++i)
    l.layers.push_back({"model.layers." + std::to_string(i), formats::attn_kind::MLA, c.is_moe(i)});
  for (int64_t k = 0; k < c.num_mtp_layers; ++k)
    l.mtp_layers.push_back(
        {"model.layers." + std::to_string(c.num_layers + k), formats::attn_kind::MLA, true});
  return l;
}

}  // namespace moxi::model::arch
