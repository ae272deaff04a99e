// DeepSeek-V3 / V3.2: every layer MLA (DSA with the lightning indexer in V3.2) with YaRN RoPE, grouped
// sigmoid routing, dense first layers and an MTP layer. Names follow the HF checkpoints
// (model.layers.{i}.mlp.experts.{e}.gate_proj/up_proj/down_proj, reference/dsa_mla_moe_mtp.md §B.2, §E.1).
#include "moxi/model/arch/blocks.h"
#include "moxi/model/arch/registry.h"

namespace moxi::model::arch {

std::vector<tensor_decl> deepseek_v3_manifest(const formats::model_config& c) {
  manifest_builder b(c);
  const ffn_names names{"mlp", "gate_proj", "up_proj", "down_proj"};
  b.add("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, param_group::EMBEDDING, init_kind::NORMAL);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    b.norm(p + ".input_layernorm", c.hidden_size, param_group::LAYER_NORM, i);
    b.mla_block(p + ".self_attn", i, param_group::MLA);
    b.norm(p + ".post_attention_layernorm", c.hidden_size, param_group::LAYER_NORM, i);
    b.ffn_block(p, i, c.is_moe(i), names);
  }
  b.norm("model.norm", c.hidden_size, param_group::NORM, -1);
  if (!c.tie_word_embeddings)
    b.add("lm_head.weight", {c.vocab_size, c.hidden_size}, param_group::LM_HEAD, init_kind::NORMAL);
  // DeepSeek's released checkpoints also repeat embed_tokens and shared_head.head inside the MTP layer;
  // moxi shares them with the main model and does not store them twice.
  const param_group mtp = param_group::MTP;
  for (int64_t k = 0; k < c.num_mtp_layers; ++k) {
    const int64_t i = c.num_layers + k;
    const std::string p = "model.layers." + std::to_string(i);
    b.norm(p + ".enorm", c.hidden_size, mtp, i);
    b.norm(p + ".hnorm", c.hidden_size, mtp, i);
    b.linear(p + ".eh_proj", c.hidden_size, 2 * c.hidden_size, mtp, i);
    b.norm(p + ".input_layernorm", c.hidden_size, mtp, i);
    b.mla_block(p + ".self_attn", i, mtp);
    b.norm(p + ".post_attention_layernorm", c.hidden_size, mtp, i);
    b.ffn_block(p, i, true, names, &mtp);
    b.norm(p + ".shared_head.norm", c.hidden_size, mtp, i);
  }
  return b.take();
}

// The same structure as the manifest above, for the loader.
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
