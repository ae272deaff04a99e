// The seed family (Kimi-Linear-style hybrid): KDA layers and (Gated DSA | MLA) layers, MoE with shared
// experts and optional latent MoE, MTP layers and an optional MoonViT tower. Tensor names follow
// Kimi-Linear's HF checkpoint (model.layers.{i}.self_attn.*, block_sparse_moe.experts.{e}.w1/w2/w3).
#include "moxi/model/arch/blocks.h"
#include "moxi/model/arch/registry.h"

namespace moxi::model::arch {

std::vector<tensor_decl> kimi_linear_manifest(const formats::model_config& c) {
  manifest_builder b(c);
  const ffn_names names{"block_sparse_moe", "w1", "w3", "w2"};
  b.add("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, param_group::EMBEDDING, init_kind::NORMAL);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i);
    b.norm(p + ".input_layernorm", c.hidden_size, param_group::LAYER_NORM, i);
    if (c.is_kda(i))
      b.kda_block(p + ".self_attn", i, param_group::KDA);
    else
      b.mla_block(p + ".self_attn", i, param_group::MLA);
    b.norm(p + ".post_attention_layernorm", c.hidden_size, param_group::LAYER_NORM, i);
    b.ffn_block(p, i, c.is_moe(i), names);
  }
  b.norm("model.norm", c.hidden_size, param_group::NORM, -1);
  if (!c.tie_word_embeddings)
    b.add("lm_head.weight", {c.vocab_size, c.hidden_size}, param_group::LM_HEAD, init_kind::NORMAL);
  // MTP (DeepSeek-V3 layout, reference/dsa_mla_moe_mtp.md §E.1): layer num_layers + k holds enorm, hnorm,
  // eh_proj, a full-attention block with the model's FFN, and shared_head.norm; embedding and lm_head are
  // shared with the main model and not stored again.
  const param_group mtp = param_group::MTP;
  for (int64_t k = 0; k < c.num_mtp_layers; ++k) {
    const int64_t i = c.num_layers + k;
    const std::string p = "model.layers." + std::to_string(i);
    b.norm(p + ".enorm", c.hidden_size, mtp, i);
    b.norm(p + ".hnorm", c.hidden_size, mtp, i);
    b.linear(p + ".eh_proj", c.hidden_size, 2 * c.hidden_size, mtp, i);
    b.norm(p + ".input_layernorm", c.hidden_size, mtp, i);
    if (c.mla)
      b.mla_block(p + ".self_attn", i, mtp);
    else
      b.kda_block(p + ".self_attn", i, mtp);
    b.norm(p + ".post_attention_layernorm", c.hidden_size, mtp, i);
    b.ffn_block(p, i, c.moe.num_experts > 0, names, &mtp);
    b.norm(p + ".shared_head.norm", c.hidden_size, mtp, i);
  }
  if (c.vision) b.vision_tower();
  return b.take();
}

// The same structure as the manifest above, for the loader.
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
