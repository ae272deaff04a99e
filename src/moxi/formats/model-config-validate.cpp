// Plausibility limits for config.json fields and the token-id checks of a model directory (see
// model-config-validate.h). The limits are plain data so that docs/security.md, the tests and the checks
// read one table.
#include "moxi/formats/model-config-validate.h"

#include <sys/stat.h>

#include <cmath>
#include <optional>
#include <string_view>

#include "moxi/base/error.h"
#include "moxi/formats/json-file.h"

namespace moxi::formats {
namespace {

using json = nlohmann::json;

constexpr int64_t kMi = int64_t(1) << 20;

// The field's value at a dotted path; nullptr when absent.
const json* find_path(const json& doc, std::string_view path) {
  const json* cur = &doc;
  while (true) {
    if (!cur->is_object()) return nullptr;
    const size_t dot = path.find('.');
    const auto it = cur->find(std::string(path.substr(0, dot)));
    if (it == cur->end()) return nullptr;
    cur = &*it;
    if (dot == std::string_view::npos) break;
    path.remove_prefix(dot + 1);
  }
  return cur;
}

// The field's value when the path leads to a number; nullptr when absent, null or of another type (the
// parser reports those).
const json* find_number(const json& doc, std::string_view path) {
  const json* v = find_path(doc, path);
  return v && v->is_number() ? v : nullptr;
}

// Whether a JSON number is above `max` (NaN counts as above), without converting a huge value to int64.
bool above(const json& v, int64_t max) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() > uint64_t(max);
  if (v.is_number_integer()) return v.get<int64_t>() > max;
  const double d = v.get<double>();
  return !(d <= double(max));
}

// The value as an integer when it is one that fits (integral floats included, as the parser reads them).
std::optional<int64_t> as_int(const json* v) {
  if (!v) return std::nullopt;
  if (v->is_number_unsigned())
    return v->get<uint64_t>() <= uint64_t(INT64_MAX) ? std::optional<int64_t>(int64_t(v->get<uint64_t>()))
                                                     : std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  const double d = v->get<double>();
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
  return std::nullopt;
}

[[noreturn]] void fail(const std::string& source, const std::string& field, const std::string& what) {
  throw error(source + ": field '" + field + "': " + what);
}

bool is_regular_file(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A token id field: an integer in [0, vocab).
void check_id(const json& v, int64_t vocab, const std::string& file, const std::string& field) {
  const std::string range = "[0, " + std::to_string(vocab) + ") of config.json";
  const auto id = v.is_number() ? as_int(&v) : std::nullopt;
  if (!v.is_number())
    fail(file, field, "expected an integer token id in the vocabulary " + range + ", got " + v.dump());
  if (!id || *id < 0 || *id >= vocab)
    fail(file, field, "token id " + v.dump() + " is outside the vocabulary " + range);
}

}  // namespace

const std::vector<config_limit>& config_limits() {
  static const std::vector<config_limit> kLimits = {
      {"vocab_size", 16 * kMi, "token ids are int32; real vocabularies are under 300k"},
      {"hidden_size", 64 * 1024, "the seed's is 7,168"},
      {"num_hidden_layers", 1024, "the seed has 93"},
      {"num_nextn_predict_layers", 16, "multi-token prediction depth; real models use 1-3"},
      {"intermediate_size", 1 * kMi, "dense FFN width; the seed's is 33,792"},
      {"moe_intermediate_size", 64 * 1024, "expert FFN width; the seed's is 3,072"},
      {"num_experts|n_routed_experts", 16 * 1024, "routed experts per layer; the seed has 896"},
      {"num_experts_per_token|num_experts_per_tok", 1024, "experts per token; the seed uses 16"},
      {"num_shared_experts|n_shared_experts", 64, "always-on experts; the seed has 2"},
      {"num_expert_group|n_group", 16 * 1024, "expert groups (at most one per expert)"},
      {"topk_group", 16 * 1024, "selected expert groups"},
      {"first_k_dense_replace", 1024, "dense layers before the MoE layers (at most num_hidden_layers)"},
      {"moe_layer_freq", 1024, "every n-th layer is MoE"},
      {"routed_expert_hidden_size", 64 * 1024, "latent MoE width; the seed's is 3,584"},
      {"num_attention_heads", 1024, "attention heads; the seed has 96"},
      {"num_key_value_heads", 1024, "attention heads"},
      {"q_lora_rank", 64 * 1024, "MLA query rank; the seed's is 1,536"},
      {"kv_lora_rank", 64 * 1024, "MLA latent width; the seed's is 512"},
      {"qk_nope_head_dim", 4096, "head width; the seed's is 128"},
      {"qk_rope_head_dim", 4096, "head width; the seed's is 64"},
      {"v_head_dim", 4096, "head width; the seed's is 128"},
      {"head_dim", 4096, "head width"},
      {"index_n_heads", 1024, "DSA indexer heads; the seed has 64"},
      {"index_head_dim", 4096, "DSA indexer head width; the seed's is 128"},
      {"index_topk", kMaxContextTokens, "DSA keys kept per query (at most the context)"},
      {"max_position_embeddings", kMaxContextTokens, "context length; the seed's is 1 Mi tokens"},
      {"model_max_length", kMaxContextTokens, "context length; the seed's is 1 Mi tokens"},
      {"rope_scaling.original_max_position_embeddings", kMaxContextTokens, "pre-YaRN context length"},
      {"rope_scaling.factor", 1024, "YaRN context extension factor"},
      {"linear_attn_config.num_heads", 1024, "KDA heads; the seed has 96"},
      {"linear_attn_config.head_dim", 4096, "KDA head width; the seed's is 128"},
      {"linear_attn_config.short_conv_kernel_size", 64, "KDA short convolution width; the seed's is 4"},
      {"quantization_config.block_size", 1024, "MX block (32 in OCP MX)"},
      {"quantization_config.weight_block_size", 64 * 1024, "FP8 weight block, each side (DeepSeek's is 128)"},
      {"vision_config.patch_size", 1024, "vision patch; the seed's is 14"},
      {"vision_config.hidden_size", 64 * 1024, "vision width; the seed's is 1,152"},
      {"vision_config.num_hidden_layers", 1024, "vision layers; the seed has 26"},
      {"vision_config.num_attention_heads", 1024, "vision heads; the seed has 16"},
      {"vision_config.intermediate_size", 1 * kMi, "vision FFN width; the seed's is 4,304"},
      {"vision_config.init_pos_emb_height", 64 * 1024, "vision position grid; the seed's is 64"},
      {"vision_config.init_pos_emb_width", 64 * 1024, "vision position grid; the seed's is 64"},
      {"vision_config.merge_kernel_size", 64, "patches merged per side; the seed merges 2"},
  };
  return kLimits;
}

void validate_model_config(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object()) return;  // the parser names this
  for (const auto& l : config_limits()) {
    std::string_view names = l.field;
    while (!names.empty()) {
      const size_t bar = names.find('|');
      const std::string name(names.substr(0, bar));
      names = bar == std::string_view::npos ? std::string_view() : names.substr(bar + 1);
      const json* v = find_path(doc, name);
      if (!v) continue;
      // A number, or a list of them (block shapes) whose every element is held to the limit.
      const json items = v->is_array() ? *v : json::array({*v});
      for (const json& e : items)
        if (e.is_number() && above(e, l.max))
          fail(
              source, name,
              e.dump() + " is above the plausibility limit of " + std::to_string(l.max) + " (" + l.why + ")");
    }
  }
  // Cross-field bounds, on values the limits above already keep small.
  const auto layers = as_int(find_number(doc, "num_hidden_layers"));
  const auto mtp = as_int(find_number(doc, "num_nextn_predict_layers"));
  for (const char* field : {"num_experts", "n_routed_experts"}) {
    const auto experts = as_int(find_number(doc, field));
    if (!experts || !layers || *experts <= 0 || *layers <= 0) continue;
    const int64_t depth = *layers + std::max<int64_t>(mtp.value_or(0), 0);
    if (*experts * depth > kMaxRoutedExpertInstances)
      fail(source, field,
           std::to_string(*experts) + " routed experts x " + std::to_string(depth) + " layers = " +
               std::to_string(*experts * depth) + " expert instances, above the plausibility limit of " +
               std::to_string(kMaxRoutedExpertInstances) + " (the seed has 84,224)");
  }
  const auto vocab = as_int(find_number(doc, "vocab_size"));
  if (vocab && *vocab > 0) {
    for (const char* field : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
      auto it = doc.find(field);
      if (it == doc.end() || it->is_null()) continue;
      if (it->is_array()) {  // HF allows a list of eos ids; every one must be a token
        for (const auto& e : *it) check_id(e, *vocab, source, field);
      } else if (it->is_number()) {
        check_id(*it, *vocab, source, field);
      }
    }
  }
}

void validate_model_dir(const model_config& config, const std::string& dir) {
  const int64_t V = config.vocab_size;
  const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";

  const std::string gen = base + "generation_config.json";
  if (is_regular_file(gen)) {
    const json j = read_json_file(gen, "generation config");
    if (!j.is_object()) throw error(gen + ": expected a JSON object");
    for (const char* field : {"bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"}) {
      auto it = j.find(field);
      if (it == j.end() || it->is_null()) continue;
      if (it->is_array()) {
        for (const auto& e : *it) check_id(e, V, gen, field);
      } else {
        check_id(*it, V, gen, field);
      }
    }
  }

  const std::string tc = base + "tokenizer_config.json";
  if (is_regular_file(tc)) {
    const json j = read_json_file(tc, "tokenizer config");
    if (j.is_object())
      if (auto it = j.find("added_tokens_decoder"); it != j.end() && it->is_object())
        for (const auto& [key, entry] : it->items()) {
          (void)entry;
          int64_t id = -1;
          try {
            size_t used = 0;
            id = std::stoll(key, &used);
            if (used != key.size()) id = -1;
          } catch (const std::exception&) {
            id = -1;
          }
          if (id < 0 || id >= V)
            fail(tc, "added_tokens_decoder",
                 "token id '" + key + "' is outside the vocabulary [0, " + std::to_string(V) +
                     ") of config.json");
        }
  }

  const std::string tj = base + "tokenizer.json";
  if (is_regular_file(tj)) {
    const json j = read_json_file(tj, "tokenizer");
    if (!j.is_object()) return;  // the tokenizer loader names this
    if (auto it = j.find("added_tokens"); it != j.end() && it->is_array())
      for (const auto& t : *it)
        if (t.is_object() && t.contains("id")) {
          std::string field = "added_tokens";
          if (t.contains("content") && t["content"].is_string())
            field += " '" + t["content"].get<std::string>() + "'";
          check_id(t["id"], V, tj, field);
        }
    if (auto m = j.find("model"); m != j.end() && m->is_object())
      if (auto v = m->find("vocab"); v != m->end() && v->is_object())
        for (const auto& [tok, id] : v->items())
          if (id.is_number() && above(id, V - 1)) check_id(id, V, tj, "model.vocab '" + tok + "'");
  }
}

}  // namespace moxi::formats
