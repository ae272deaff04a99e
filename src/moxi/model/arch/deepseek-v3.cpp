// DeepSeek-V3 / V3.2: every layer MLA (DSA with the lightning indexer in V3.2) with YaRN RoPE, grouped
// sigmoid routing, dense first layers and an MTP layer. Names follow the HF checkpoints
// (model.layers.{i}.mlp.experts.{e}.gate_proj/up_proj/down_proj, docs/deepseek.md §B.2, §E.1).
#include "moxi/formats/config-reader.h"
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

// DeepSeek-V3 and V3.2 (HF names, docs/deepseek.md §A.1, §B.1, §D.1).
void deepseek_v3_config(formats::config_reader& r, formats::model_config& c) {
  c.dense_intermediate_size = r.get_int("intermediate_size");
  c.max_position_embeddings = r.get_int("max_position_embeddings");
  c.layer_attn.assign(size_t(c.num_layers), formats::attn_kind::MLA);
  c.mla = formats::parse_mla(r, /*kv_heads_are_mla=*/true);
  c.mla->use_nope = false;
  c.mla->output_gate = false;
  if (r.bool_or("rope_interleave", true) == false)
    r.fail("rope_interleave", "DeepSeek MLA uses interleaved RoPE; false is not supported");
  if (r.bool_or("attention_bias", false)) r.fail("attention_bias", "biased attention is not supported");
  c.dsa = formats::parse_dsa(r);
  if (c.model_type == "deepseek_v32" && !c.dsa)
    r.fail("index_topk", "deepseek_v32 needs the DSA indexer fields");

  formats::moe_config& m = c.moe;
  m.num_experts = r.get_int("n_routed_experts");
  m.experts_per_token = r.get_int("num_experts_per_tok");
  m.num_shared_experts = r.int_or("n_shared_experts", 0);
  m.intermediate_size = r.get_int("moe_intermediate_size");
  const std::string scoring = r.string_or("scoring_func", "softmax");
  if (scoring == "sigmoid")
    m.score = formats::router_score::SIGMOID;
  else if (scoring == "softmax")
    m.score = formats::router_score::SOFTMAX;
  else
    r.fail("scoring_func", "expected 'sigmoid' or 'softmax', got '" + scoring + "'");
  const std::string method = r.string_or("topk_method", "noaux_tc");
  if (method != "noaux_tc" && method != "greedy" && method != "group_limited_greedy")
    r.fail("topk_method", "unsupported top-k method '" + method + "'");
  m.renormalize = r.bool_or("norm_topk_prob", true);
  m.routed_scaling_factor = r.double_or("routed_scaling_factor", 1.0);
  m.num_groups = r.int_or("n_group", 1);
  m.topk_group = r.int_or("topk_group", 1);
  m.first_k_dense = r.int_or("first_k_dense_replace", 0);
  m.layer_freq = r.int_or("moe_layer_freq", 1);
  r.ignore({"ep_size", "aux_loss_alpha", "seq_aux", "pretraining_tp"});
  formats::validate_moe(r, m, c.num_layers, "n_routed_experts", "num_experts_per_tok", "n_group");
}

}  // namespace moxi::model::arch
