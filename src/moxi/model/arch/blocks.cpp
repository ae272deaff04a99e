// Tensor declarations of the building blocks, following the HF module names of Kimi-Linear
// (modeling_kimi.py, docs/kimi-linear.md §1.2), DeepSeek-V3/V3.2 (docs/deepseek.md §A.2, §B.2)
// and MoonViT (docs/kimi-linear.md §5). Names new to moxi are listed in docs/checkpoints.md.
#include "moxi/model/arch/blocks.h"

#include "moxi/base/error.h"
#include "moxi/model/layers/attention.h"

namespace moxi::model::arch {

tensor_decl& manifest_builder::add(std::string name, std::vector<int64_t> shape, param_group group,
                                   init_kind init, int64_t layer) {
  tensor_decl d;
  d.name = std::move(name);
  d.shape = std::move(shape);
  d.group = group;
  d.init = init;
  d.layer = layer;
  out_.push_back(std::move(d));
  return out_.back();
}

tensor_decl& manifest_builder::linear(const std::string& prefix, int64_t out, int64_t in, param_group group,
                                      int64_t layer, bool writes_residual) {
  auto& d = add(prefix + ".weight", {out, in}, group, writes_residual ? init_kind::NORMAL_OUT : init_kind::NORMAL,
                layer);
  d.fp8_eligible = true;
  return d;
}

tensor_decl& manifest_builder::norm(const std::string& prefix, int64_t dim, param_group group, int64_t layer) {
  return add(prefix + ".weight", {dim}, group, init_kind::ONES, layer);
}

// KDA (docs/kimi-linear.md §1.2): q/k/v projections each with a depthwise causal conv, low-rank decay gate
// f_a/f_b with A_log and dt_bias, beta projection, output gate (low rank g_a/g_b or full rank g_proj),
// per-head gated RMSNorm o_norm, o_proj.
void manifest_builder::kda_block(const std::string& p, int64_t layer, param_group group) {
  const auto& k = *c_.kda;
  const int64_t h = c_.hidden_size, P = k.proj_dim(), D = k.head_dim, W = k.conv_kernel;
  for (const char* x : {"q", "k", "v"}) linear(p + "." + x + "_proj", P, h, group, layer);
  for (const char* x : {"q", "k", "v"})
    add(p + "." + x + "_conv1d.weight", {P, 1, W}, group, init_kind::CONV, layer);
  linear(p + ".f_a_proj", D, h, group, layer);
  linear(p + ".f_b_proj", P, D, group, layer);
  linear(p + ".b_proj", k.num_heads, h, group, layer);
  add(p + ".A_log", {1, 1, k.num_heads, 1}, group, init_kind::KDA_A_LOG, layer).fp32 = true;
  add(p + ".dt_bias", {P}, group, init_kind::KDA_DT_BIAS, layer).fp32 = true;
  if (k.full_rank_output_gate) {
    linear(p + ".g_proj", P, h, group, layer);
  } else {
    linear(p + ".g_a_proj", D, h, group, layer);
    linear(p + ".g_b_proj", P, D, group, layer);
  }
  norm(p + ".o_norm", D, group, layer);
  linear(p + ".o_proj", h, P, group, layer, /*writes_residual=*/true);
}

// MLA (DeepSeek-V3 names): q_a/q_a_layernorm/q_b or a direct q_proj, kv_a_proj_with_mqa + kv_a_layernorm,
// kv_b_proj, o_proj; the Gated-DSA output gate g_proj; the lightning indexer (DeepSeek-V3.2 names).
void manifest_builder::mla_block(const std::string& p, int64_t layer, param_group group) {
  const auto& m = *c_.mla;
  const int64_t h = c_.hidden_size, nh = m.num_heads;
  if (m.q_lora_rank) {
    linear(p + ".q_a_proj", *m.q_lora_rank, h, group, layer);
    norm(p + ".q_a_layernorm", *m.q_lora_rank, group, layer);
    linear(p + ".q_b_proj", nh * m.qk_head_dim(), *m.q_lora_rank, group, layer);
  } else {
    linear(p + ".q_proj", nh * m.qk_head_dim(), h, group, layer);
  }
  linear(p + ".kv_a_proj_with_mqa", m.kv_lora_rank + m.qk_rope_head_dim, h, group, layer);
  norm(p + ".kv_a_layernorm", m.kv_lora_rank, group, layer);
  linear(p + ".kv_b_proj", nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, group, layer);
  if (m.output_gate) linear(p + ".g_proj", nh * m.v_head_dim, h, group, layer);
  linear(p + ".o_proj", h, nh * m.v_head_dim, group, layer, /*writes_residual=*/true);
  if (c_.dsa) {
    const auto& d = *c_.dsa;
    if (!m.q_lora_rank)
      throw error(c_.source + ": field 'index_topk': the DSA indexer reads the query latent, so it needs q_lora_rank");
    linear(p + ".indexer.wq_b", d.index_n_heads * d.index_head_dim, *m.q_lora_rank, group, layer);
    linear(p + ".indexer.wk", d.index_head_dim, h, group, layer);
    norm(p + ".indexer.k_norm", d.index_head_dim, group, layer);
    add(p + ".indexer.k_norm.bias", {d.index_head_dim}, group, init_kind::ZEROS, layer).fp32 = true;
    // weights_proj stays BF16 in DeepSeek-V3.2 checkpoints (docs/deepseek.md §A.2).
    add(p + ".indexer.weights_proj.weight", {d.index_n_heads, h}, group, init_kind::NORMAL, layer);
  }
}

// Sliding-window attention (HF Mistral / Gemma names): q_proj, k_proj, v_proj (GQA), o_proj; no biases.
void manifest_builder::swa_block(const std::string& p, int64_t layer, param_group group) {
  const auto& s = *c_.swa;
  const int64_t h = c_.hidden_size;
  linear(p + ".q_proj", s.q_dim(), h, group, layer);
  linear(p + ".k_proj", s.kv_dim(), h, group, layer);
  linear(p + ".v_proj", s.kv_dim(), h, group, layer);
  linear(p + ".o_proj", h, s.q_dim(), group, layer, /*writes_residual=*/true);
}

void manifest_builder::ffn_block(const std::string& p, int64_t layer, bool moe_layer, const ffn_names& n,
                                 const param_group* override_group) {
  const int64_t h = c_.hidden_size;
  auto grp = [&](param_group g) { return override_group ? *override_group : g; };
  if (!moe_layer) {
    const std::string q = p + ".mlp";
    const int64_t f = c_.dense_intermediate_size;
    linear(q + ".gate_proj", f, h, grp(param_group::DENSE_MLP), layer);
    linear(q + ".up_proj", f, h, grp(param_group::DENSE_MLP), layer);
    linear(q + ".down_proj", h, f, grp(param_group::DENSE_MLP), layer, true);
    return;
  }
  const auto& m = c_.moe;
  const std::string q = p + "." + n.moe_prefix;
  // The router stays BF16 (never FP8/MXFP4); its correction bias is F32 (selection only, §3.3).
  add(q + ".gate.weight", {m.num_experts, h}, grp(param_group::ROUTER), init_kind::NORMAL, layer);
  add(q + ".gate.e_score_correction_bias", {m.num_experts}, grp(param_group::ROUTER), init_kind::ZEROS, layer)
      .fp32 = true;
  const int64_t w = m.expert_width(h), f = m.intermediate_size;
  if (m.latent_size) {
    linear(q + ".latent_down_proj", w, h, grp(param_group::LATENT_PROJ), layer);
    if (m.latent_norm) norm(q + ".latent_norm", w, grp(param_group::LATENT_PROJ), layer);
    linear(q + ".latent_up_proj", h, w, grp(param_group::LATENT_PROJ), layer, true);
  }
  for (int64_t e = 0; e < m.num_experts; ++e) {
    const std::string x = q + ".experts." + std::to_string(e) + ".";
    linear(x + n.expert_gate, f, w, grp(param_group::ROUTED_EXPERTS), layer).routed_expert = true;
    linear(x + n.expert_up, f, w, grp(param_group::ROUTED_EXPERTS), layer).routed_expert = true;
    linear(x + n.expert_down, w, f, grp(param_group::ROUTED_EXPERTS), layer, true).routed_expert = true;
  }
  if (m.num_shared_experts > 0) {
    const std::string s = q + ".shared_experts";
    const int64_t fs = f * m.num_shared_experts;
    linear(s + ".gate_proj", fs, h, grp(param_group::SHARED_EXPERTS), layer);
    linear(s + ".up_proj", fs, h, grp(param_group::SHARED_EXPERTS), layer);
    linear(s + ".down_proj", h, fs, grp(param_group::SHARED_EXPERTS), layer, true);
  }
}

void manifest_builder::decoder(const model_layout& l) {
  const int64_t h = c_.hidden_size;
  add(l.embed, {c_.vocab_size, h}, param_group::EMBEDDING, init_kind::NORMAL);
  auto block = [&](const layer_layout& layer, int64_t i, const param_group* mtp) {
    const auto& kind = attention_kind(layer.attn);
    const auto attn_group = mtp ? *mtp : kind.group;
    const auto norm_group = mtp ? *mtp : param_group::LAYER_NORM;
    norm(layer.prefix + ".input_layernorm", h, norm_group, i);
    kind.declare(*this, layer.prefix + ".self_attn", i, attn_group);
    norm(layer.prefix + ".post_attention_layernorm", h, norm_group, i);
    ffn_block(layer.prefix, i, layer.moe, l.ffn, mtp);
  };
  for (size_t i = 0; i < l.layers.size(); ++i) block(l.layers[i], int64_t(i), nullptr);
  add(l.final_norm, {h}, param_group::NORM, init_kind::ONES);
  if (!c_.tie_word_embeddings) add(l.lm_head, {c_.vocab_size, h}, param_group::LM_HEAD, init_kind::NORMAL);
  const param_group mtp = param_group::MTP;
  for (size_t k = 0; k < l.mtp_layers.size(); ++k) {
    const layer_layout& layer = l.mtp_layers[k];
    const int64_t i = c_.num_layers + int64_t(k);
    norm(layer.prefix + ".enorm", h, mtp, i);
    norm(layer.prefix + ".hnorm", h, mtp, i);
    linear(layer.prefix + ".eh_proj", h, 2 * h, mtp, i);
    block(layer, i, &mtp);
    norm(layer.prefix + ".shared_head.norm", h, mtp, i);
  }
}

// MoonViT (docs/kimi-linear.md §5): patch embedding conv, learned 2D position table, pre-LN blocks with
// fused wqkv, wo and a 2-layer GELU MLP, a final LayerNorm, then the 2x2-merge projector.
void manifest_builder::vision_tower() {
  const auto& v = *c_.vision;
  const auto G = param_group::VISION;
  const int64_t d = v.hidden_size;
  const std::string t = "vision_tower";
  add(t + ".patch_embed.proj.weight", {d, 3, v.patch_size, v.patch_size}, G, init_kind::NORMAL);
  add(t + ".patch_embed.proj.bias", {d}, G, init_kind::ZEROS);
  add(t + ".patch_embed.pos_emb.weight", {v.pos_emb_height, v.pos_emb_width, d}, G, init_kind::NORMAL);
  for (int64_t i = 0; i < v.num_layers; ++i) {
    const std::string b = t + ".encoder.blocks." + std::to_string(i);
    for (const char* ln : {".norm0", ".norm1"}) {
      add(b + ln + ".weight", {d}, G, init_kind::ONES);
      add(b + ln + ".bias", {d}, G, init_kind::ZEROS);
    }
    add(b + ".wqkv.weight", {3 * d, d}, G, init_kind::NORMAL);
    add(b + ".wqkv.bias", {3 * d}, G, init_kind::ZEROS);
    add(b + ".wo.weight", {d, d}, G, init_kind::NORMAL_OUT);
    add(b + ".wo.bias", {d}, G, init_kind::ZEROS);
    add(b + ".mlp.fc0.weight", {v.intermediate_size, d}, G, init_kind::NORMAL);
    add(b + ".mlp.fc0.bias", {v.intermediate_size}, G, init_kind::ZEROS);
    add(b + ".mlp.fc1.weight", {d, v.intermediate_size}, G, init_kind::NORMAL_OUT);
    add(b + ".mlp.fc1.bias", {d}, G, init_kind::ZEROS);
  }
  add(t + ".encoder.final_layernorm.weight", {d}, G, init_kind::ONES);
  add(t + ".encoder.final_layernorm.bias", {d}, G, init_kind::ZEROS);
  const int64_t merged = d * v.merge_kernel * v.merge_kernel;
  const std::string pr = "multi_modal_projector";
  add(pr + ".pre_norm.weight", {d}, G, init_kind::ONES);
  add(pr + ".pre_norm.bias", {d}, G, init_kind::ZEROS);
  add(pr + ".linear_1.weight", {merged, merged}, G, init_kind::NORMAL);
  add(pr + ".linear_1.bias", {merged}, G, init_kind::ZEROS);
  add(pr + ".linear_2.weight", {c_.hidden_size, merged}, G, init_kind::NORMAL);
  add(pr + ".linear_2.bias", {c_.hidden_size}, G, init_kind::ZEROS);
}

}  // namespace moxi::model::arch
