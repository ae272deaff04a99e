// The seed family (Kimi-Linear-style hybrid): KDA layers, (Gated DSA | MLA) layers and optionally
// sliding-window attention layers (config layer_types), MoE with shared
// experts and optional latent MoE, MTP layers and an optional MoonViT tower. Tensor names follow
// Kimi-Linear's HF checkpoint (model.layers.{i}.self_attn.*, block_sparse_moe.experts.{e}.w1/w2/w3).
#include "moxi/formats/config-reader.h"
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

// Both Kimi-Linear and the seed preset (kimi_linear field names).
void kimi_linear_config(formats::config_reader& r, formats::model_config& c) {
  c.dense_intermediate_size = r.get_int("intermediate_size");
  c.max_position_embeddings = r.has("max_position_embeddings") ? r.get_int("max_position_embeddings")
                                                               : r.int_or("model_max_length", 0);
  // head_dim is hidden/heads, unused by MLA (kda.md §3.1); sliding-window layers read it (parse_swa).
  r.ignore({"model_max_length", "head_dim", "layer_types"});

  // The per-layer kinds: HF layer_types when present (the field of Qwen3-Next, Gemma 2/3, gpt-oss), else
  // Kimi-Linear's 1-based kda_layers / full_attn_layers; with both, they must agree.
  const bool typed = r.has("layer_types");
  if (typed)
    c.layer_attn = formats::parse_layer_types(r, c.num_layers);
  else
    c.layer_attn.assign(size_t(c.num_layers), formats::attn_kind::MLA);
  if (auto la = r.sub("linear_attn_config")) {
    formats::kda_config k;
    k.num_heads = la->get_int("num_heads");
    k.head_dim = la->get_int("head_dim");
    k.conv_kernel = la->int_or("short_conv_kernel_size", 4);
    formats::require_positive(*la, "num_heads", k.num_heads);
    formats::require_positive(*la, "head_dim", k.head_dim);
    formats::require_positive(*la, "short_conv_kernel_size", k.conv_kernel);
    if (la->has("gate_lower_bound")) {
      k.gate = formats::kda_gate_kind::LOWER_BOUND;
      k.gate_lower_bound = la->get_double("gate_lower_bound");
      if (!(k.gate_lower_bound < 0)) la->fail("gate_lower_bound", "must be negative");
    }
    la->ignore({"gate_lower_bound"});
    k.full_rank_output_gate = la->bool_or("use_full_rank_gate", false);
    const bool listed = la->has("kda_layers") || la->has("full_attn_layers") || !typed;
    const auto kda_layers = listed ? la->int_list("kda_layers") : std::vector<int64_t>{};
    const auto full_layers = listed ? la->int_list("full_attn_layers") : std::vector<int64_t>{};
    la->ignore({"kda_layers", "full_attn_layers"});
    std::vector<int> seen(size_t(c.num_layers), 0);
    auto mark = [&](const std::vector<int64_t>& list, const char* field, formats::attn_kind kind) {
      for (int64_t one_based : list) {
        if (one_based < 1 || one_based > c.num_layers)
          la->fail(field, "layer " + std::to_string(one_based) + " is outside 1.." +
                              std::to_string(c.num_layers) + " (the lists are 1-based)");
        if (seen[size_t(one_based - 1)]++)
          la->fail(field, "layer " + std::to_string(one_based) +
                              " appears twice (in kda_layers and full_attn_layers, or repeated)");
        if (typed && c.layer_attn[size_t(one_based - 1)] != kind)
          la->fail(field, "layer " + std::to_string(one_based) + " is '" +
                              formats::attn_kind_name(c.layer_attn[size_t(one_based - 1)]) +
                              "' in layer_types");
        c.layer_attn[size_t(one_based - 1)] = kind;
      }
    };
    mark(kda_layers, "kda_layers", formats::attn_kind::KDA);
    mark(full_layers, "full_attn_layers", formats::attn_kind::MLA);
    if (listed)
      for (int64_t i = 0; i < c.num_layers; ++i)
        if (!seen[size_t(i)] && !(typed && c.layer_attn[size_t(i)] == formats::attn_kind::SWA))
          la->fail("kda_layers",
                   "layer " + std::to_string(i + 1) + " is in neither kda_layers nor full_attn_layers");
    la->finish();
    if (c.num_kda_layers() > 0) c.kda = k;
  }
  if (c.num_kda_layers() > 0 && !c.kda)
    r.fail("linear_attn_config", "layer_types has linear_attention layers; their KDA shape is missing");

  if (c.num_swa_layers() > 0) {
    c.swa = formats::parse_swa(r, c.hidden_size);
  } else if (r.has("sliding_window")) {
    r.fail("sliding_window", "set, but no layer is 'sliding_attention' in layer_types");
  }
  r.ignore({"sliding_window"});
  if (c.num_mtp_layers > 0 && !c.kda && c.num_mla_layers() == 0)
    r.fail("num_nextn_predict_layers", "MTP layers use MLA or KDA attention; this model has neither");

  if (c.num_mla_layers() > 0) {
    // With SWA layers, num_key_value_heads is theirs (MLA has no KV heads: it attends to one latent).
    c.mla = formats::parse_mla(r, /*kv_heads_are_mla=*/!c.swa);
    c.mla->use_nope = r.bool_or("mla_use_nope", false);
    c.mla->output_gate = r.bool_or("mla_use_output_gate", false);
    c.dsa = formats::parse_dsa(r);
  } else {
    r.ignore({"num_attention_heads", "num_key_value_heads"});
  }

  formats::moe_config& m = c.moe;
  m.num_experts = r.int_or("num_experts", 0);
  if (m.num_experts > 0) {
    m.experts_per_token = r.get_int("num_experts_per_token");
    m.num_shared_experts = r.int_or("num_shared_experts", 0);
    m.intermediate_size = r.get_int("moe_intermediate_size");
    m.latent_size = r.opt_int("routed_expert_hidden_size");
    m.latent_norm = r.bool_or("latent_moe_use_norm", false);
    if (m.latent_norm && !m.latent_size)
      r.fail("latent_moe_use_norm", "needs routed_expert_hidden_size (a latent MoE)");
    const std::string act = r.string_or("moe_router_activation_func", "sigmoid");
    if (act == "sigmoid")
      m.score = formats::router_score::SIGMOID;
    else if (act == "softmax")
      m.score = formats::router_score::SOFTMAX;
    else
      r.fail("moe_router_activation_func", "expected 'sigmoid' or 'softmax', got '" + act + "'");
    m.renormalize = r.bool_or("moe_renormalize", true);
    m.routed_scaling_factor = r.double_or("routed_scaling_factor", 1.0);
    const bool grouped = r.bool_or("use_grouped_topk", false);
    m.num_groups = grouped ? r.int_or("num_expert_group", 1) : 1;
    m.topk_group = grouped ? r.int_or("topk_group", 1) : 1;
    r.ignore({"num_expert_group", "topk_group"});
    m.first_k_dense = r.int_or("first_k_dense_replace", 0);
    m.layer_freq = r.int_or("moe_layer_freq", 1);
    formats::validate_moe(r, m, c.num_layers, "num_experts", "num_experts_per_token", "num_expert_group");
  }
  c.vision = formats::parse_vision(r);
}

}  // namespace moxi::model::arch
