// The shared config blocks of config-reader.h.
#include "moxi/formats/config-reader.h"

namespace moxi::formats {

using json = nlohmann::json;

void require_positive(config_reader& r, const std::string& name, int64_t v) {
  if (v <= 0) r.fail(name, "must be positive, got " + std::to_string(v));
}

std::optional<dsa_config> parse_dsa(config_reader& r) {
  // Null counts as absent (HF writes unset optional fields as null); all null or absent: no indexer.
  const bool any = r.has("index_topk") || r.has("index_n_heads") || r.has("index_head_dim");
  r.ignore({"index_topk", "index_n_heads", "index_head_dim"});
  if (!any) return std::nullopt;
  dsa_config d;
  d.index_n_heads = r.get_int("index_n_heads");
  d.index_head_dim = r.get_int("index_head_dim");
  d.index_topk = r.get_int("index_topk");
  require_positive(r, "index_n_heads", d.index_n_heads);
  require_positive(r, "index_head_dim", d.index_head_dim);
  require_positive(r, "index_topk", d.index_topk);
  return d;
}

mla_config parse_mla(config_reader& r, bool kv_heads_are_mla) {
  mla_config m;
  m.num_heads = r.get_int("num_attention_heads");
  require_positive(r, "num_attention_heads", m.num_heads);
  if (auto kv = r.opt_int("num_key_value_heads"); kv_heads_are_mla && kv && *kv != m.num_heads)
    r.fail("num_key_value_heads", "MLA needs num_key_value_heads == num_attention_heads (" +
                                      std::to_string(m.num_heads) + "), got " + std::to_string(*kv));
  m.q_lora_rank = r.opt_int("q_lora_rank");
  if (m.q_lora_rank) require_positive(r, "q_lora_rank", *m.q_lora_rank);
  m.kv_lora_rank = r.get_int("kv_lora_rank");
  require_positive(r, "kv_lora_rank", m.kv_lora_rank);
  m.qk_nope_head_dim = r.get_int("qk_nope_head_dim");
  m.qk_rope_head_dim = r.get_int("qk_rope_head_dim");
  m.v_head_dim = r.get_int("v_head_dim");
  if (m.qk_nope_head_dim < 0) r.fail("qk_nope_head_dim", "must not be negative");
  if (m.qk_rope_head_dim < 0 || m.qk_rope_head_dim % 2) r.fail("qk_rope_head_dim", "must be even and >= 0");
  if (m.qk_head_dim() <= 0)
    r.fail("qk_nope_head_dim", "qk_nope_head_dim + qk_rope_head_dim must be positive");
  require_positive(r, "v_head_dim", m.v_head_dim);
  return m;
}

void validate_moe(config_reader& r, const moe_config& m, int64_t num_layers, const char* experts_field,
                  const char* topk_field, const char* groups_field) {
  if (m.num_experts < 0) r.fail(experts_field, "must not be negative");
  if (m.num_experts == 0) return;
  require_positive(r, topk_field, m.experts_per_token);
  if (m.experts_per_token > m.num_experts)
    r.fail(topk_field, std::to_string(m.experts_per_token) + " experts per token exceeds " + experts_field +
                           " = " + std::to_string(m.num_experts));
  require_positive(r, groups_field, m.num_groups);
  if (m.num_experts % m.num_groups)
    r.fail(groups_field, std::to_string(m.num_groups) + " groups do not divide " +
                             std::to_string(m.num_experts) + " experts");
  if (m.topk_group < 1 || m.topk_group > m.num_groups)
    r.fail("topk_group",
           "must be in [1, " + std::to_string(m.num_groups) + "], got " + std::to_string(m.topk_group));
  if (m.experts_per_token > m.topk_group * (m.num_experts / m.num_groups))
    r.fail(topk_field,
           "more experts per token than the " + std::to_string(m.topk_group) + " selected groups hold");
  if (m.num_shared_experts < 0) r.fail("num_shared_experts", "must not be negative");
  require_positive(r, "moe_intermediate_size", m.intermediate_size);
  if (m.first_k_dense < 0 || m.first_k_dense > num_layers)
    r.fail("first_k_dense_replace", "must be in [0, num_hidden_layers]");
  require_positive(r, "moe_layer_freq", m.layer_freq);
  if (m.latent_size) require_positive(r, "routed_expert_hidden_size", *m.latent_size);
}

std::optional<vision_config> parse_vision(config_reader& r) {
  auto v = r.sub("vision_config");
  if (!v) return std::nullopt;
  vision_config out;
  out.patch_size = v->get_int("patch_size");
  out.hidden_size = v->get_int("hidden_size");
  out.num_layers = v->get_int("num_hidden_layers");
  out.num_heads = v->get_int("num_attention_heads");
  out.intermediate_size = v->get_int("intermediate_size");
  out.pos_emb_height = v->int_or("init_pos_emb_height", 64);
  out.pos_emb_width = v->int_or("init_pos_emb_width", 64);
  if (v->has("merge_kernel_size")) {
    const auto mk = v->int_list("merge_kernel_size");
    if (mk.size() != 2 || mk[0] != mk[1] || mk[0] <= 0)
      v->fail("merge_kernel_size", "expected a square [k, k] merge kernel");
    out.merge_kernel = mk[0];
  }
  for (auto [name, value] : {std::pair{"patch_size", out.patch_size},
                             {"hidden_size", out.hidden_size},
                             {"num_hidden_layers", out.num_layers},
                             {"num_attention_heads", out.num_heads},
                             {"intermediate_size", out.intermediate_size},
                             {"init_pos_emb_height", out.pos_emb_height},
                             {"init_pos_emb_width", out.pos_emb_width}})
    require_positive(*v, name, value);
  if (out.hidden_size % out.num_heads) v->fail("num_attention_heads", "must divide hidden_size");
  v->ignore({"model_type"});
  v->finish();
  return out;
}

// HF layer_types: one kind name per layer.
std::vector<attn_kind> parse_layer_types(config_reader& r, int64_t num_layers) {
  const json& v = r.raw("layer_types");
  if (!v.is_array() || int64_t(v.size()) != num_layers)
    r.fail("layer_types", "expected an array of " + std::to_string(num_layers) + " layer kinds");
  std::vector<attn_kind> out;
  for (const json& e : v) {
    const std::string name = e.is_string() ? e.get<std::string>() : e.dump();
    bool found = false;
    for (attn_kind k : {attn_kind::KDA, attn_kind::MLA, attn_kind::SWA})
      if (name == attn_kind_name(k)) out.push_back(k), found = true;
    if (!found)
      r.fail("layer_types", "unknown layer kind " + e.dump() +
                                " (expected linear_attention, full_attention or sliding_attention)");
  }
  return out;
}

// Sliding-window attention layers: HF Mistral / Gemma / gpt-oss names.
swa_config parse_swa(config_reader& r, int64_t hidden) {
  swa_config w;
  w.window = r.get_int("sliding_window");
  require_positive(r, "sliding_window", w.window);
  w.num_heads = r.get_int("num_attention_heads");
  require_positive(r, "num_attention_heads", w.num_heads);
  w.num_kv_heads = r.int_or("num_key_value_heads", w.num_heads);
  require_positive(r, "num_key_value_heads", w.num_kv_heads);
  if (w.num_heads % w.num_kv_heads)
    r.fail("num_key_value_heads", std::to_string(w.num_kv_heads) + " KV heads do not divide " +
                                      std::to_string(w.num_heads) + " attention heads");
  w.head_dim = r.has("head_dim") ? r.get_int("head_dim") : hidden / w.num_heads;
  if (w.head_dim <= 0 || w.head_dim % 2) r.fail("head_dim", "must be positive and even (RoPE pairs)");
  return w;
}

}  // namespace moxi::formats
