// config.json -> model_config. A small field reader records which keys were consumed so that any key
// left over is reported as unknown, naming it; every validation failure names the field and the file.
#include "moxi/formats/model-config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/formats/model-config-validate.h"

namespace moxi::formats {
namespace {

using json = nlohmann::json;

// Reads fields of one JSON object, remembering which were used.
class field_reader {
 public:
  field_reader(const json& obj, std::string source, std::string prefix)
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {
    if (!obj_.is_object()) fail_here("expected a JSON object");
  }

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw error(source_ + ": field '" + prefix_ + field + "': " + what);
  }

  bool has(const std::string& name) const { return obj_.contains(name) && !obj_.at(name).is_null(); }
  bool present(const std::string& name) const { return obj_.contains(name); }

  int64_t get_int(const std::string& name) {
    if (!has(name)) fail(name, "required field is missing");
    return as_int(name);
  }
  std::optional<int64_t> opt_int(const std::string& name) {
    used_.insert(name);
    if (!has(name)) return std::nullopt;
    return as_int(name);
  }
  int64_t int_or(const std::string& name, int64_t fallback) { return opt_int(name).value_or(fallback); }

  double get_double(const std::string& name) {
    if (!has(name)) fail(name, "required field is missing");
    return as_double(name);
  }
  double double_or(const std::string& name, double fallback) {
    used_.insert(name);
    return has(name) ? as_double(name) : fallback;
  }

  bool bool_or(const std::string& name, bool fallback) {
    used_.insert(name);
    if (!has(name)) return fallback;
    const json& v = obj_.at(name);
    if (!v.is_boolean()) fail(name, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }

  std::string get_string(const std::string& name) {
    if (!has(name)) fail(name, "required field is missing");
    return as_string(name);
  }
  std::string string_or(const std::string& name, const std::string& fallback) {
    used_.insert(name);
    return has(name) ? as_string(name) : fallback;
  }

  std::vector<int64_t> int_list(const std::string& name) {
    used_.insert(name);
    if (!has(name)) fail(name, "required field is missing");
    const json& v = obj_.at(name);
    if (!v.is_array()) fail(name, "expected an array of integers, got " + v.dump());
    std::vector<int64_t> out;
    for (const json& e : v) {
      if (!e.is_number_integer()) fail(name, "expected an array of integers, found " + e.dump());
      out.push_back(e.get<int64_t>());
    }
    return out;
  }

  // A nested object; nullopt when absent or null.
  std::optional<field_reader> sub(const std::string& name) {
    used_.insert(name);
    if (!has(name)) return std::nullopt;
    return field_reader(obj_.at(name), source_, prefix_ + name + ".");
  }

  const json& raw(const std::string& name) {
    used_.insert(name);
    return obj_.at(name);
  }

  void ignore(std::initializer_list<const char*> names) {
    for (const char* n : names) used_.insert(n);
  }

  // Every key must have been read or explicitly ignored.
  void finish() const {
    for (const auto& [key, value] : obj_.items())
      if (!used_.count(key)) fail(key, "unknown field (not part of this model type's config)");
  }

 private:
  [[noreturn]] void fail_here(const std::string& what) const {
    throw error(source_ + ": " + (prefix_.empty() ? std::string("config") : "field '" + prefix_ + "'") +
                ": " + what);
  }
  int64_t as_int(const std::string& name) {
    used_.insert(name);
    const json& v = obj_.at(name);
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
    }
    fail(name, "expected an integer, got " + v.dump());
  }
  double as_double(const std::string& name) {
    used_.insert(name);
    const json& v = obj_.at(name);
    if (!v.is_number()) fail(name, "expected a number, got " + v.dump());
    return v.get<double>();
  }
  std::string as_string(const std::string& name) {
    used_.insert(name);
    const json& v = obj_.at(name);
    if (!v.is_string()) fail(name, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }

  const json& obj_;
  std::string source_;
  std::string prefix_;
  std::set<std::string> used_;
};

void require_positive(field_reader& r, const std::string& name, int64_t v) {
  if (v <= 0) r.fail(name, "must be positive, got " + std::to_string(v));
}

// Fields that describe the file or the Python implementation, not the model math.
void ignore_descriptive_fields(field_reader& r) {
  r.ignore({"model_type", "architectures", "auto_map", "transformers_version", "dtype", "torch_dtype",
            "use_cache", "initializer_range", "_name_or_path", "attention_dropout"});
}

rope_config parse_rope(field_reader& r) {
  rope_config rope;
  rope.theta = r.double_or("rope_theta", 10000.0);
  if (!(rope.theta > 0)) r.fail("rope_theta", "must be positive");
  if (auto s = r.sub("rope_scaling")) {
    const std::string type = s->has("type") ? s->get_string("type") : s->get_string("rope_type");
    s->ignore({"type", "rope_type"});
    if (type != "yarn") s->fail("type", "only 'yarn' rope scaling is supported, got '" + type + "'");
    rope.yarn = true;
    rope.factor = s->get_double("factor");
    rope.original_max_position_embeddings = s->get_int("original_max_position_embeddings");
    rope.beta_fast = s->double_or("beta_fast", 32.0);
    rope.beta_slow = s->double_or("beta_slow", 1.0);
    rope.mscale = s->double_or("mscale", 1.0);
    rope.mscale_all_dim = s->double_or("mscale_all_dim", 0.0);
    if (!(rope.factor >= 1.0)) s->fail("factor", "must be >= 1");
    require_positive(*s, "original_max_position_embeddings", rope.original_max_position_embeddings);
    if (!(rope.beta_fast > rope.beta_slow)) s->fail("beta_fast", "must be greater than beta_slow");
    s->finish();
  }
  return rope;
}

std::optional<dsa_config> parse_dsa(field_reader& r) {
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

mla_config parse_mla(field_reader& r, bool kv_heads_are_mla) {
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

void validate_moe(field_reader& r, const moe_config& m, int64_t num_layers, const char* experts_field,
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

std::optional<quant_config> parse_quant(field_reader& r) {
  auto q = r.sub("quantization_config");
  if (!q) return std::nullopt;
  quant_config out;
  const std::string method = q->get_string("quant_method");
  if (method == "mxfp4") {
    out.method = quant_method::MXFP4;
    out.block_size = q->int_or("block_size", 32);
    if (out.block_size != 32)
      q->fail("block_size", "OCP MX blocks are 32 elements, got " + std::to_string(out.block_size));
    const std::string act = q->string_or("activation_format", "bf16");
    if (act == "bf16")
      out.activations = act_format::BF16;
    else if (act == "mxfp8_e4m3")
      out.activations = act_format::MXFP8_E4M3;
    else if (act == "mxfp8_e5m2")
      out.activations = act_format::MXFP8_E5M2;
    else
      q->fail("activation_format", "expected bf16, mxfp8_e4m3 or mxfp8_e5m2, got '" + act + "'");
    const std::string scope = q->string_or("quantized_modules", "routed_experts");
    if (scope != "routed_experts")
      q->fail("quantized_modules", "only 'routed_experts' is supported, got '" + scope + "'");
    q->ignore({"quant_method"});
  } else if (method == "fp8") {
    out.method = quant_method::FP8_BLOCK;
    out.weight_block_size = q->int_list("weight_block_size");
    if (out.weight_block_size.size() != 2 || out.weight_block_size[0] <= 0 || out.weight_block_size[1] <= 0)
      q->fail("weight_block_size", "expected [rows, cols] with positive sizes");
    const std::string fmt = q->string_or("fmt", "e4m3");
    if (fmt != "e4m3") q->fail("fmt", "only e4m3 FP8 weights are supported, got '" + fmt + "'");
    q->ignore({"quant_method", "activation_scheme", "scale_fmt"});
  } else {
    q->fail("quant_method", "expected 'mxfp4' or 'fp8', got '" + method + "'");
  }
  q->finish();
  return out;
}

std::optional<vision_config> parse_vision(field_reader& r) {
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
std::vector<attn_kind> parse_layer_types(field_reader& r, int64_t num_layers) {
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
swa_config parse_swa(field_reader& r, int64_t hidden) {
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

// Both Kimi-Linear and the seed preset (kimi_linear field names).
void parse_kimi_linear(field_reader& r, model_config& c) {
  c.dense_intermediate_size = r.get_int("intermediate_size");
  c.max_position_embeddings = r.has("max_position_embeddings") ? r.get_int("max_position_embeddings")
                                                               : r.int_or("model_max_length", 0);
  // head_dim is hidden/heads, unused by MLA (kda.md §3.1); sliding-window layers read it (parse_swa).
  r.ignore({"model_max_length", "head_dim", "layer_types"});

  // The per-layer kinds: HF layer_types when present (the field of Qwen3-Next, Gemma 2/3, gpt-oss), else
  // Kimi-Linear's 1-based kda_layers / full_attn_layers; with both, they must agree.
  const bool typed = r.has("layer_types");
  if (typed)
    c.layer_attn = parse_layer_types(r, c.num_layers);
  else
    c.layer_attn.assign(size_t(c.num_layers), attn_kind::MLA);
  if (auto la = r.sub("linear_attn_config")) {
    kda_config k;
    k.num_heads = la->get_int("num_heads");
    k.head_dim = la->get_int("head_dim");
    k.conv_kernel = la->int_or("short_conv_kernel_size", 4);
    require_positive(*la, "num_heads", k.num_heads);
    require_positive(*la, "head_dim", k.head_dim);
    require_positive(*la, "short_conv_kernel_size", k.conv_kernel);
    if (la->has("gate_lower_bound")) {
      k.gate = kda_gate_kind::LOWER_BOUND;
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
    auto mark = [&](const std::vector<int64_t>& list, const char* field, attn_kind kind) {
      for (int64_t one_based : list) {
        if (one_based < 1 || one_based > c.num_layers)
          la->fail(field, "layer " + std::to_string(one_based) + " is outside 1.." +
                              std::to_string(c.num_layers) + " (the lists are 1-based)");
        if (seen[size_t(one_based - 1)]++)
          la->fail(field, "layer " + std::to_string(one_based) +
                              " appears twice (in kda_layers and full_attn_layers, or repeated)");
        if (typed && c.layer_attn[size_t(one_based - 1)] != kind)
          la->fail(field, "layer " + std::to_string(one_based) + " is '" +
                              attn_kind_name(c.layer_attn[size_t(one_based - 1)]) + "' in layer_types");
        c.layer_attn[size_t(one_based - 1)] = kind;
      }
    };
    mark(kda_layers, "kda_layers", attn_kind::KDA);
    mark(full_layers, "full_attn_layers", attn_kind::MLA);
    if (listed)
      for (int64_t i = 0; i < c.num_layers; ++i)
        if (!seen[size_t(i)] && !(typed && c.layer_attn[size_t(i)] == attn_kind::SWA))
          la->fail("kda_layers",
                   "layer " + std::to_string(i + 1) + " is in neither kda_layers nor full_attn_layers");
    la->finish();
    if (c.num_kda_layers() > 0) c.kda = k;
  }
  if (c.num_kda_layers() > 0 && !c.kda)
    r.fail("linear_attn_config", "layer_types has linear_attention layers; their KDA shape is missing");

  if (c.num_swa_layers() > 0) {
    c.swa = parse_swa(r, c.hidden_size);
  } else if (r.has("sliding_window")) {
    r.fail("sliding_window", "set, but no layer is 'sliding_attention' in layer_types");
  }
  r.ignore({"sliding_window"});
  if (c.num_mtp_layers > 0 && !c.kda && c.num_mla_layers() == 0)
    r.fail("num_nextn_predict_layers", "MTP layers use MLA or KDA attention; this model has neither");

  if (c.num_mla_layers() > 0) {
    // With SWA layers, num_key_value_heads is theirs (MLA has no KV heads: it attends to one latent).
    c.mla = parse_mla(r, /*kv_heads_are_mla=*/!c.swa);
    c.mla->use_nope = r.bool_or("mla_use_nope", false);
    c.mla->output_gate = r.bool_or("mla_use_output_gate", false);
    c.dsa = parse_dsa(r);
  } else {
    r.ignore({"num_attention_heads", "num_key_value_heads"});
  }

  moe_config& m = c.moe;
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
      m.score = router_score::SIGMOID;
    else if (act == "softmax")
      m.score = router_score::SOFTMAX;
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
    validate_moe(r, m, c.num_layers, "num_experts", "num_experts_per_token", "num_expert_group");
  }
  c.vision = parse_vision(r);
}

// DeepSeek-V3 and V3.2 (HF names, docs/deepseek.md §A.1, §B.1, §D.1).
void parse_deepseek(field_reader& r, model_config& c) {
  c.dense_intermediate_size = r.get_int("intermediate_size");
  c.max_position_embeddings = r.get_int("max_position_embeddings");
  c.layer_attn.assign(size_t(c.num_layers), attn_kind::MLA);
  c.mla = parse_mla(r, /*kv_heads_are_mla=*/true);
  c.mla->use_nope = false;
  c.mla->output_gate = false;
  if (r.bool_or("rope_interleave", true) == false)
    r.fail("rope_interleave", "DeepSeek MLA uses interleaved RoPE; false is not supported");
  if (r.bool_or("attention_bias", false)) r.fail("attention_bias", "biased attention is not supported");
  c.dsa = parse_dsa(r);
  if (c.model_type == "deepseek_v32" && !c.dsa)
    r.fail("index_topk", "deepseek_v32 needs the DSA indexer fields");

  moe_config& m = c.moe;
  m.num_experts = r.get_int("n_routed_experts");
  m.experts_per_token = r.get_int("num_experts_per_tok");
  m.num_shared_experts = r.int_or("n_shared_experts", 0);
  m.intermediate_size = r.get_int("moe_intermediate_size");
  const std::string scoring = r.string_or("scoring_func", "softmax");
  if (scoring == "sigmoid")
    m.score = router_score::SIGMOID;
  else if (scoring == "softmax")
    m.score = router_score::SOFTMAX;
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
  validate_moe(r, m, c.num_layers, "n_routed_experts", "num_experts_per_tok", "n_group");
}

}  // namespace

const char* attn_kind_name(attn_kind kind) {
  switch (kind) {
    case attn_kind::KDA:
      return "linear_attention";
    case attn_kind::MLA:
      return "full_attention";
    case attn_kind::SWA:
      return "sliding_attention";
  }
  return "?";
}

int64_t model_config::num_layers_of(attn_kind kind) const {
  return std::count(layer_attn.begin(), layer_attn.end(), kind);
}

model_config parse_model_config(const nlohmann::json& doc, const std::string& source) {
  validate_model_config(doc, source);  // plausibility limits first: nothing below is sized before them
  field_reader r(doc, source, "");
  model_config c;
  c.source = source;
  c.json = doc;
  c.model_type = r.get_string("model_type");
  if (r.has("architectures")) {
    const json& a = r.raw("architectures");
    if (!a.is_array() || a.empty() || !a[0].is_string())
      r.fail("architectures", "expected a non-empty array of strings");
    c.architecture = a[0].get<std::string>();
  }
  ignore_descriptive_fields(r);
  c.vocab_size = r.get_int("vocab_size");
  c.hidden_size = r.get_int("hidden_size");
  c.num_layers = r.get_int("num_hidden_layers");
  require_positive(r, "vocab_size", c.vocab_size);
  require_positive(r, "hidden_size", c.hidden_size);
  require_positive(r, "num_hidden_layers", c.num_layers);
  c.rms_norm_eps = r.double_or("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0)) r.fail("rms_norm_eps", "must be positive");
  c.tie_word_embeddings = r.bool_or("tie_word_embeddings", false);
  c.hidden_act = r.string_or("hidden_act", "silu");
  if (c.hidden_act != "silu")
    r.fail("hidden_act", "only 'silu' (SwiGLU) is supported, got '" + c.hidden_act + "'");
  c.bos_token_id = r.opt_int("bos_token_id");
  c.eos_token_id = r.opt_int("eos_token_id");
  c.pad_token_id = r.opt_int("pad_token_id");
  c.num_mtp_layers = r.int_or("num_nextn_predict_layers", 0);
  if (c.num_mtp_layers < 0) r.fail("num_nextn_predict_layers", "must not be negative");
  c.rope = parse_rope(r);

  if (c.model_type == "kimi_linear") {
    parse_kimi_linear(r, c);
  } else if (c.model_type == "deepseek_v3" || c.model_type == "deepseek_v32") {
    parse_deepseek(r, c);
  } else {
    r.fail("model_type",
           "unknown model type '" + c.model_type + "' (supported: kimi_linear, deepseek_v3, deepseek_v32)");
  }
  require_positive(r, "intermediate_size", c.dense_intermediate_size);
  if (c.max_position_embeddings <= 0) r.fail("max_position_embeddings", "required and must be positive");

  c.quant = parse_quant(r);
  if (c.quant && c.quant->method == quant_method::MXFP4) {
    if (c.moe.num_experts == 0)
      r.fail("quantization_config", "MXFP4 quantizes routed experts; this model has none");
    const int64_t width = c.moe.expert_width(c.hidden_size);
    if (width % 32)
      r.fail(c.moe.latent_size ? "routed_expert_hidden_size" : "hidden_size",
             "the routed-expert input width " + std::to_string(width) +
                 " must be a multiple of the MXFP4 block (32)");
    if (c.moe.intermediate_size % 32)
      r.fail("moe_intermediate_size",
             std::to_string(c.moe.intermediate_size) + " must be a multiple of the MXFP4 block (32)");
  }
  r.finish();
  return c;
}

model_config load_model_config(const std::string& path) {
  std::string file = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) file = path + "/config.json";
  std::ifstream in(file, std::ios::binary);
  if (!in) throw io_error("cannot open config", file, errno);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.size() > (64u << 20)) throw error(file + ": config is larger than 64 MiB");
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) throw error(file + ": not valid JSON");
  return parse_model_config(doc, file);
}

}  // namespace moxi::formats
