// Reading the fields of a config.json object: a reader that records which keys were consumed, so that a
// key left over is reported as unknown, naming it, and the parsers of the config blocks that several
// architectures share (MLA, DSA indexer, sliding window, MoE bounds, vision tower). The architecture
// registry (model/arch/registry.h) parses each model type's own fields with these; formats/model-config.cpp
// parses the fields every model type has. Every failure names the field and the file.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/formats/model-config.h"

namespace moxi::formats {

// Reads fields of one JSON object, remembering which were used.
class config_reader {
 public:
  config_reader(const nlohmann::json& obj, std::string source, std::string prefix)
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
    const nlohmann::json& v = obj_.at(name);
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
    const nlohmann::json& v = obj_.at(name);
    if (!v.is_array()) fail(name, "expected an array of integers, got " + v.dump());
    std::vector<int64_t> out;
    for (const nlohmann::json& e : v) {
      if (!e.is_number_integer()) fail(name, "expected an array of integers, found " + e.dump());
      out.push_back(e.get<int64_t>());
    }
    return out;
  }

  // A nested object; nullopt when absent or null.
  std::optional<config_reader> sub(const std::string& name) {
    used_.insert(name);
    if (!has(name)) return std::nullopt;
    return config_reader(obj_.at(name), source_, prefix_ + name + ".");
  }

  const nlohmann::json& raw(const std::string& name) {
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
    const nlohmann::json& v = obj_.at(name);
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
    }
    fail(name, "expected an integer, got " + v.dump());
  }
  double as_double(const std::string& name) {
    used_.insert(name);
    const nlohmann::json& v = obj_.at(name);
    if (!v.is_number()) fail(name, "expected a number, got " + v.dump());
    return v.get<double>();
  }
  std::string as_string(const std::string& name) {
    used_.insert(name);
    const nlohmann::json& v = obj_.at(name);
    if (!v.is_string()) fail(name, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }

  const nlohmann::json& obj_;
  std::string source_;
  std::string prefix_;
  std::set<std::string> used_;
};

// Throws naming the field unless v > 0.
void require_positive(config_reader& r, const std::string& name, int64_t v);

// Shared config blocks, read from the object `r` reads (HF field names).
// DeepSeek-V3.2's lightning indexer (index_topk, index_n_heads, index_head_dim); nullopt when all absent.
std::optional<dsa_config> parse_dsa(config_reader& r);
// Multi-head latent attention; with kv_heads_are_mla, num_key_value_heads must equal num_attention_heads.
mla_config parse_mla(config_reader& r, bool kv_heads_are_mla);
// Bounds of a parsed MoE block; the *_field arguments are this model type's spellings of the fields.
void validate_moe(config_reader& r, const moe_config& m, int64_t num_layers, const char* experts_field,
                  const char* topk_field, const char* groups_field);
// The MoonViT tower (vision_config); nullopt when absent.
std::optional<vision_config> parse_vision(config_reader& r);
// HF layer_types: one kind name per layer (linear_attention, full_attention, sliding_attention).
std::vector<attn_kind> parse_layer_types(config_reader& r, int64_t num_layers);
// Sliding-window attention layers (HF Mistral / Gemma / gpt-oss names); head_dim defaults to hidden/heads.
swa_config parse_swa(config_reader& r, int64_t hidden);

}  // namespace moxi::formats
