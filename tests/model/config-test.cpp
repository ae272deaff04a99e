// model_config: every shipped config parses, fields land where docs/model-spec.md §2 and the public configs
// (docs/kimi-linear.md §3.1, docs/deepseek.md §A.1, §D.1) put them, and every invalid config
// (built by editing a shipped one) fails with a moxi::error that names the offending field or file.
#include "moxi/model/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "moxi/base/error.h"
#include "moxi/formats/model-config-validate.h"
#include "moxi/formats/model-config.h"

namespace moxi::formats {
namespace {

// Configs are read as every tool reads them: the common fields here, the model type's through the registry.
using model::load_model_config;
using model::parse_model_config;

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string config_path(const std::string& name) {
  return std::string(MOXI_SOURCE_DIR) + "/configs/" + name;
}

json read_json(const std::string& name) {
  std::ifstream in(config_path(name));
  EXPECT_TRUE(in.good()) << config_path(name);
  return json::parse(in);
}

// Parses `doc` and returns the moxi::error message, or "" when it parsed (a test failure by itself).
std::string parse_error(const json& doc) {
  try {
    parse_model_config(doc, "edited.json");
  } catch (const moxi::error& e) {
    return e.what();
  }
  return "";
}

// Edits a copy of a shipped config and expects the parse to fail with a message that contains every
// string in `needles` (the field name, and the file for context).
void expect_invalid(const std::string& base, const std::function<void(json&)>& edit,
                    std::initializer_list<std::string> needles) {
  json doc = read_json(base);
  edit(doc);
  const std::string msg = parse_error(doc);
  ASSERT_FALSE(msg.empty()) << "edited " << base << " parsed but should not have";
  EXPECT_NE(msg.find("edited.json"), std::string::npos) << msg;
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

TEST(ModelConfigTest, EveryShippedConfigParses) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(std::string(MOXI_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    model_config c;
    ASSERT_NO_THROW(c = load_model_config(entry.path().string()));
    EXPECT_EQ(c.source, entry.path().string());
    EXPECT_EQ(int64_t(c.layer_attn.size()), c.num_layers);
    EXPECT_EQ(c.num_kda_layers() + c.num_mla_layers() + c.num_swa_layers(), c.num_layers);
    ++n;
  }
  EXPECT_GE(n, 6);
}

TEST(ModelConfigTest, LoadsConfigJsonFromADirectory) {
  const fs::path dir = fs::temp_directory_path() / ("moxi-cfg-dir-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(config_path("tiny-seed.json"), dir / "config.json", fs::copy_options::overwrite_existing);
  const auto c = load_model_config(dir.string());
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.source, (dir / "config.json").string());
  fs::remove_all(dir);
}

TEST(ModelConfigTest, SeedLayerPatternIsOneBasedInTheFile) {
  const auto c = load_model_config(config_path("seed-2.8t.json"));
  EXPECT_EQ(c.model_type, "kimi_linear");
  EXPECT_EQ(c.architecture, "KimiLinearForCausalLM");
  EXPECT_EQ(c.num_layers, 93);
  EXPECT_EQ(c.num_kda_layers(), 69);
  EXPECT_EQ(c.num_mla_layers(), 24);
  // full_attn_layers [4,8,...,92,93] (1-based) -> 0-based 3,7,...,91,92.
  EXPECT_TRUE(c.is_kda(0));
  EXPECT_TRUE(c.is_kda(1));
  EXPECT_TRUE(c.is_kda(2));
  EXPECT_FALSE(c.is_kda(3));
  EXPECT_TRUE(c.is_kda(4));
  EXPECT_FALSE(c.is_kda(7));
  EXPECT_TRUE(c.is_kda(90));
  EXPECT_FALSE(c.is_kda(91));
  EXPECT_FALSE(c.is_kda(92));
  for (int64_t i = 0; i < 92; ++i) EXPECT_EQ(c.is_kda(i), (i + 1) % 4 != 0) << i;
  EXPECT_EQ(c.layer_attn[3], attn_kind::MLA);
  EXPECT_EQ(c.layer_attn[0], attn_kind::KDA);
}

TEST(ModelConfigTest, SeedFieldsLandRight) {
  const auto c = load_model_config(config_path("seed-2.8t.json"));
  EXPECT_EQ(c.hidden_size, 7168);
  EXPECT_EQ(c.vocab_size, 163840);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.dense_intermediate_size, 33792);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
  EXPECT_EQ(c.bos_token_id, 163584);
  EXPECT_EQ(c.eos_token_id, 163586);
  EXPECT_EQ(c.pad_token_id, 163839);

  ASSERT_TRUE(c.kda);
  EXPECT_EQ(c.kda->num_heads, 96);
  EXPECT_EQ(c.kda->head_dim, 128);
  EXPECT_EQ(c.kda->proj_dim(), 96 * 128);
  EXPECT_EQ(c.kda->conv_kernel, 4);
  EXPECT_EQ(c.kda->gate, kda_gate_kind::LOWER_BOUND);
  EXPECT_DOUBLE_EQ(c.kda->gate_lower_bound, -5.0);
  EXPECT_TRUE(c.kda->full_rank_output_gate);

  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->num_heads, 96);
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_EQ(c.mla->kv_lora_rank, 512);
  EXPECT_EQ(c.mla->qk_nope_head_dim, 128);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 64);
  EXPECT_EQ(c.mla->qk_head_dim(), 192);
  EXPECT_EQ(c.mla->v_head_dim, 128);
  EXPECT_TRUE(c.mla->use_nope);
  EXPECT_TRUE(c.mla->output_gate);

  ASSERT_TRUE(c.dsa);
  EXPECT_EQ(c.dsa->index_n_heads, 64);
  EXPECT_EQ(c.dsa->index_head_dim, 128);
  EXPECT_EQ(c.dsa->index_topk, 2048);

  EXPECT_EQ(c.moe.num_experts, 896);
  EXPECT_EQ(c.moe.experts_per_token, 16);
  EXPECT_EQ(c.moe.num_shared_experts, 2);
  EXPECT_EQ(c.moe.intermediate_size, 3072);
  EXPECT_EQ(c.moe.latent_size, 3584);
  EXPECT_EQ(c.moe.expert_width(c.hidden_size), 3584);
  EXPECT_TRUE(c.moe.latent_norm);
  EXPECT_EQ(c.moe.score, router_score::SIGMOID);
  EXPECT_TRUE(c.moe.renormalize);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 1.0);
  EXPECT_EQ(c.moe.num_groups, 1);
  EXPECT_EQ(c.moe.topk_group, 1);
  EXPECT_EQ(c.moe.first_k_dense, 1);
  EXPECT_FALSE(c.is_moe(0));
  EXPECT_TRUE(c.is_moe(1));
  EXPECT_TRUE(c.is_moe(92));
  EXPECT_EQ(c.num_mtp_layers, 1);
  EXPECT_FALSE(c.rope.yarn);

  ASSERT_TRUE(c.quant);
  EXPECT_EQ(c.quant->method, quant_method::MXFP4);
  EXPECT_EQ(c.quant->activations, act_format::MXFP8_E4M3);
  EXPECT_EQ(c.quant->block_size, 32);

  ASSERT_TRUE(c.vision);
  EXPECT_EQ(c.vision->patch_size, 14);
  EXPECT_EQ(c.vision->hidden_size, 1152);
  EXPECT_EQ(c.vision->num_layers, 26);
  EXPECT_EQ(c.vision->num_heads, 16);
  EXPECT_EQ(c.vision->intermediate_size, 4304);
  EXPECT_EQ(c.vision->pos_emb_height, 64);
  EXPECT_EQ(c.vision->pos_emb_width, 64);
  EXPECT_EQ(c.vision->merge_kernel, 2);
}

TEST(ModelConfigTest, KimiLinearFieldsLandRight) {
  const auto c = load_model_config(config_path("kimi-linear-48b-a3b.json"));
  EXPECT_EQ(c.hidden_size, 2304);
  EXPECT_EQ(c.num_layers, 27);
  EXPECT_EQ(c.num_kda_layers(), 20);
  EXPECT_EQ(c.num_mla_layers(), 7);
  // docs/kimi-linear.md §3.2: 0-based MLA layers 3,7,11,15,19,23,26.
  for (int64_t i : {3, 7, 11, 15, 19, 23, 26}) EXPECT_FALSE(c.is_kda(i)) << i;
  for (int64_t i : {0, 1, 2, 4, 24, 25}) EXPECT_TRUE(c.is_kda(i)) << i;
  EXPECT_EQ(c.max_position_embeddings, 1048576);  // from model_max_length
  ASSERT_TRUE(c.kda);
  EXPECT_EQ(c.kda->gate, kda_gate_kind::SOFTPLUS);
  EXPECT_FALSE(c.kda->full_rank_output_gate);
  EXPECT_EQ(c.kda->num_heads, 32);
  EXPECT_EQ(c.kda->head_dim, 128);
  ASSERT_TRUE(c.mla);
  EXPECT_FALSE(c.mla->q_lora_rank.has_value());  // "q_lora_rank": null
  EXPECT_TRUE(c.mla->use_nope);
  EXPECT_FALSE(c.mla->output_gate);
  EXPECT_FALSE(c.dsa.has_value());
  EXPECT_EQ(c.moe.num_experts, 256);
  EXPECT_EQ(c.moe.experts_per_token, 8);
  EXPECT_EQ(c.moe.num_shared_experts, 1);
  EXPECT_EQ(c.moe.intermediate_size, 1024);
  EXPECT_FALSE(c.moe.latent_size.has_value());
  EXPECT_EQ(c.moe.expert_width(c.hidden_size), 2304);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 2.446);
  EXPECT_EQ(c.num_mtp_layers, 0);
  EXPECT_FALSE(c.rope.yarn);
  EXPECT_FALSE(c.quant.has_value());
  EXPECT_FALSE(c.vision.has_value());
}

TEST(ModelConfigTest, DeepSeekV32FieldsLandRight) {
  const auto c = load_model_config(config_path("deepseek-v3.2.json"));
  EXPECT_EQ(c.model_type, "deepseek_v32");
  EXPECT_EQ(c.num_layers, 61);
  EXPECT_EQ(c.num_mla_layers(), 61);
  EXPECT_EQ(c.num_kda_layers(), 0);
  EXPECT_FALSE(c.kda.has_value());
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->num_heads, 128);
  EXPECT_EQ(c.mla->q_lora_rank, 1536);
  EXPECT_FALSE(c.mla->use_nope);
  EXPECT_FALSE(c.mla->output_gate);
  ASSERT_TRUE(c.dsa);
  EXPECT_EQ(c.dsa->index_n_heads, 64);
  EXPECT_EQ(c.dsa->index_head_dim, 128);
  EXPECT_EQ(c.dsa->index_topk, 2048);
  // Routing (docs/deepseek.md §D.1).
  EXPECT_EQ(c.moe.num_experts, 256);
  EXPECT_EQ(c.moe.experts_per_token, 8);
  EXPECT_EQ(c.moe.num_shared_experts, 1);
  EXPECT_EQ(c.moe.intermediate_size, 2048);
  EXPECT_EQ(c.moe.num_groups, 8);
  EXPECT_EQ(c.moe.topk_group, 4);
  EXPECT_EQ(c.moe.score, router_score::SIGMOID);
  EXPECT_TRUE(c.moe.renormalize);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 2.5);
  EXPECT_EQ(c.moe.first_k_dense, 3);
  EXPECT_FALSE(c.is_moe(2));
  EXPECT_TRUE(c.is_moe(3));
  EXPECT_EQ(c.dense_intermediate_size, 18432);
  EXPECT_EQ(c.num_mtp_layers, 1);
  // YaRN.
  EXPECT_TRUE(c.rope.yarn);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 40.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(c.rope.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(c.rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.mscale_all_dim, 1.0);
  EXPECT_EQ(c.max_position_embeddings, 163840);
  // FP8 block quantization.
  ASSERT_TRUE(c.quant);
  EXPECT_EQ(c.quant->method, quant_method::FP8_BLOCK);
  EXPECT_EQ(c.quant->weight_block_size, (std::vector<int64_t>{128, 128}));
}

TEST(ModelConfigTest, TinyConfigsHaveTheSameShapesAsTheirLargeOnes) {
  const auto s = load_model_config(config_path("tiny-seed.json"));
  EXPECT_EQ(s.num_layers, 6);
  for (int64_t i : {0, 1, 2, 4}) EXPECT_TRUE(s.is_kda(i)) << i;
  for (int64_t i : {3, 5}) EXPECT_FALSE(s.is_kda(i)) << i;
  EXPECT_TRUE(s.dsa && s.kda && s.mla && s.quant && s.vision);
  EXPECT_EQ(s.kda->gate, kda_gate_kind::LOWER_BOUND);
  const auto k = load_model_config(config_path("tiny-kimi-linear.json"));
  EXPECT_FALSE(k.dsa.has_value());
  EXPECT_FALSE(k.mla->q_lora_rank.has_value());
  EXPECT_EQ(k.kda->gate, kda_gate_kind::SOFTPLUS);
  const auto d = load_model_config(config_path("tiny-deepseek-v3.2.json"));
  EXPECT_EQ(d.moe.num_groups, 4);
  EXPECT_EQ(d.moe.topk_group, 2);
  EXPECT_TRUE(d.rope.yarn);
}

// HF configs write unset optional fields as null (Kimi-Linear's "q_lora_rank": null, "rope_scaling": null);
// null DSA fields mean "no indexer" (dense MLA), exactly like leaving them out.
TEST(ModelConfigTest, NullDsaFieldsMeanNoIndexer) {
  json doc = read_json("kimi-linear-48b-a3b.json");
  doc["index_topk"] = nullptr;
  doc["index_n_heads"] = nullptr;
  doc["index_head_dim"] = nullptr;
  const auto c = parse_model_config(doc, "null-dsa.json");
  EXPECT_FALSE(c.dsa.has_value());
  EXPECT_EQ(c.num_mla_layers(), 7);
  // One null among set fields is still a partial DSA config, naming the null field.
  json seed = read_json("seed-2.8t.json");
  seed["index_head_dim"] = nullptr;
  const std::string msg = parse_error(seed);
  EXPECT_NE(msg.find("'index_head_dim'"), std::string::npos) << msg;
}

TEST(ModelConfigTest, KeepsTheDocumentVerbatim) {
  const json doc = read_json("seed-2.8t.json");
  const auto c = parse_model_config(doc, "seed");
  EXPECT_EQ(c.json, doc);
}

// ---- invalid configs: each error names the field ----

TEST(ModelConfigInvalidTest, MissingHiddenSize) {
  expect_invalid("seed-2.8t.json", [](json& d) { d.erase("hidden_size"); }, {"'hidden_size'", "missing"});
}

TEST(ModelConfigInvalidTest, LayerInBothLists) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["linear_attn_config"]["kda_layers"].push_back(4); },
                 {"linear_attn_config.", "_layers'", "layer 4"});
}

TEST(ModelConfigInvalidTest, LayerInNeitherList) {
  expect_invalid("seed-2.8t.json",
                 [](json& d) {
                   auto& full = d["linear_attn_config"]["full_attn_layers"];
                   full.erase(full.size() - 1);  // drops 93
                 },
                 {"linear_attn_config.", "layer 93", "neither"});
}

TEST(ModelConfigInvalidTest, LayerOutOfRange) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["linear_attn_config"]["full_attn_layers"].push_back(94); },
                 {"linear_attn_config.full_attn_layers", "94"});
}

TEST(ModelConfigInvalidTest, ZeroInAOneBasedList) {
  // A 0-based list (0 instead of 1) is caught, not silently shifted.
  expect_invalid("seed-2.8t.json", [](json& d) { d["linear_attn_config"]["kda_layers"][0] = 0; },
                 {"linear_attn_config.kda_layers", "1-based"});
}

TEST(ModelConfigInvalidTest, TopKExceedsExperts) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["num_experts_per_token"] = 897; },
                 {"'num_experts_per_token'"});
  expect_invalid("deepseek-v3.2.json", [](json& d) { d["num_experts_per_tok"] = 300; },
                 {"'num_experts_per_tok'"});
}

TEST(ModelConfigInvalidTest, TopKGroupExceedsGroups) {
  expect_invalid("deepseek-v3.2.json", [](json& d) { d["topk_group"] = 9; }, {"'topk_group'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["topk_group"] = 2; }, {"'topk_group'"});
}

TEST(ModelConfigInvalidTest, GroupsDoNotDivideExperts) {
  expect_invalid("deepseek-v3.2.json", [](json& d) { d["n_group"] = 7; }, {"'n_group'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["num_expert_group"] = 5; }, {"'num_expert_group'"});
}

TEST(ModelConfigInvalidTest, UnknownField) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["hiden_size"] = d["hidden_size"]; },
                 {"'hiden_size'", "unknown"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["linear_attn_config"]["num_head"] = 96; },
                 {"'linear_attn_config.num_head'", "unknown"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["quantization_config"]["group_size"] = 32; },
                 {"'quantization_config.group_size'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["vision_config"]["depth"] = 26; },
                 {"'vision_config.depth'"});
}

TEST(ModelConfigInvalidTest, WrongType) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["hidden_size"] = "7168"; }, {"'hidden_size'", "integer"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["hidden_size"] = 7168.5; }, {"'hidden_size'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["mla_use_nope"] = "yes"; }, {"'mla_use_nope'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["linear_attn_config"]["kda_layers"] = "1,2,3"; },
                 {"'linear_attn_config.kda_layers'"});
}

TEST(ModelConfigInvalidTest, PartialDsaFields) {
  expect_invalid("seed-2.8t.json", [](json& d) { d.erase("index_topk"); }, {"'index_topk'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d.erase("index_n_heads"); }, {"'index_n_heads'"});
  expect_invalid("kimi-linear-48b-a3b.json", [](json& d) { d["index_head_dim"] = 128; }, {"'index_"});
  // deepseek_v32 without any indexer field is a contradiction too.
  expect_invalid("deepseek-v3.2.json",
                 [](json& d) {
                   d.erase("index_topk");
                   d.erase("index_n_heads");
                   d.erase("index_head_dim");
                 },
                 {"'index_topk'"});
}

TEST(ModelConfigInvalidTest, Mxfp4NeedsBlockMultiples) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["moe_intermediate_size"] = 3080; },
                 {"'moe_intermediate_size'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["routed_expert_hidden_size"] = 3590; },
                 {"'routed_expert_hidden_size'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["quantization_config"]["block_size"] = 16; },
                 {"'quantization_config.block_size'"});
}

TEST(ModelConfigInvalidTest, UnknownModelType) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["model_type"] = "llama"; }, {"'model_type'", "llama"});
}

TEST(ModelConfigInvalidTest, BadRopeScalingType) {
  expect_invalid("deepseek-v3.2.json", [](json& d) { d["rope_scaling"]["type"] = "linear"; },
                 {"rope_scaling.", "linear"});
  expect_invalid("deepseek-v3.2.json", [](json& d) { d["rope_scaling"].erase("factor"); },
                 {"'rope_scaling.factor'"});
}

TEST(ModelConfigInvalidTest, LatentNormWithoutLatentSize) {
  expect_invalid("seed-2.8t.json", [](json& d) { d.erase("routed_expert_hidden_size"); },
                 {"'latent_moe_use_norm'"});
}

TEST(ModelConfigInvalidTest, OtherContradictions) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["num_key_value_heads"] = 8; }, {"'num_key_value_heads'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["hidden_act"] = "gelu"; }, {"'hidden_act'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["linear_attn_config"]["gate_lower_bound"] = 1.0; },
                 {"'linear_attn_config.gate_lower_bound'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["quantization_config"]["quant_method"] = "gptq"; },
                 {"'quantization_config.quant_method'"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["hidden_size"] = 0; }, {"'hidden_size'", "positive"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["first_k_dense_replace"] = 94; },
                 {"'first_k_dense_replace'"});
  expect_invalid("deepseek-v3.2.json", [](json& d) { d["quantization_config"]["weight_block_size"] = {128}; },
                 {"'quantization_config.weight_block_size'"});
}

// ---- plausibility limits (issue 14 C2, C3, C4) ----

// Sets a dotted path in doc, creating objects on the way.
void set_path(json& doc, const std::string& path, const json& v) {
  json* cur = &doc;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1) {
    json& next = (*cur)[path.substr(start, dot - start)];
    if (!next.is_object()) next = json::object();
    cur = &next;
  }
  (*cur)[path.substr(start)] = v;
}

std::vector<std::string> spellings(const config_limit& l) {
  std::vector<std::string> out;
  std::string f = l.field;
  for (size_t bar; (bar = f.find('|')) != std::string::npos; f = f.substr(bar + 1))
    out.push_back(f.substr(0, bar));
  out.push_back(f);
  return out;
}

// Every limit, at one past it and at the absurd values of the probe (2^31, 2^35, 2^62, 1e6 as a float,
// 1e300, 2^64 - 1): the parse fails, naming the field and the limit, before anything is sized from it.
TEST(ModelConfigLimitsTest, EveryLimitNamesItsField) {
  ASSERT_GE(config_limits().size(), 30u);
  for (const auto& l : config_limits()) {
    for (const auto& field : spellings(l)) {
      std::vector<json> values = {
          json(l.max + 1), json(int64_t(1) << 31), json(int64_t(1) << 35), json(int64_t(1) << 62),
          json(1e300),     json(UINT64_MAX)};
      if (l.max < 1000000) values.push_back(json(1e6));
      for (const json& v : values) {
        if (v.is_number_integer() && v.get<int64_t>() <= l.max) continue;
        SCOPED_TRACE(field + " = " + v.dump());
        for (const char* base : {"seed-2.8t.json", "deepseek-v3.2.json"}) {
          expect_invalid(base, [&](json& d) { set_path(d, field, v); },
                         {"'" + field + "'", "plausibility limit of " + std::to_string(l.max)});
        }
      }
      // At the limit the field passes this check (the config may still fail for other reasons).
      json d = read_json("seed-2.8t.json");
      set_path(d, field, l.max);
      EXPECT_EQ(parse_error(d).find("'" + field + "': " + std::to_string(l.max) + " is above"),
                std::string::npos);
    }
  }
}

TEST(ModelConfigLimitsTest, TheProbesValuesFailFast) {
  expect_invalid("seed-2.8t.json", [](json& d) { d["num_nextn_predict_layers"] = 1000000; },
                 {"'num_nextn_predict_layers'", "1000000", "plausibility limit of 16"});
  expect_invalid("seed-2.8t.json", [](json& d) { d["num_experts"] = 1e6; },
                 {"'num_experts'", "plausibility"});
  for (int shift : {62, 35, 31})
    expect_invalid("seed-2.8t.json", [&](json& d) { d["max_position_embeddings"] = int64_t(1) << shift; },
                   {"'max_position_embeddings'", std::to_string(int64_t(1) << shift), "plausibility limit"});
  // Each within its own limit, but together more expert instances than any model has.
  expect_invalid("seed-2.8t.json", [](json& d) { d["num_experts"] = 8192; },
                 {"'num_experts'", "expert instances"});
  expect_invalid("deepseek-v3.2.json", [](json& d) { d["n_routed_experts"] = 16384; },
                 {"'n_routed_experts'", "expert instances"});
}

TEST(ModelConfigLimitsTest, SpecialTokenIdsMustBeInTheVocabulary) {
  for (const char* field : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    for (const json& v : {json(163840), json(-1), json(int64_t(1) << 40), json::array({163586, 163840})}) {
      SCOPED_TRACE(std::string(field) + " = " + v.dump());
      expect_invalid("seed-2.8t.json", [&](json& d) { d[field] = v; },
                     {std::string("'") + field + "'", "outside the vocabulary [0, 163840)"});
    }
  }
  json d = read_json("seed-2.8t.json");
  d["bos_token_id"] = 163839;  // the last id is fine
  EXPECT_EQ(parse_error(d), "");
}

// Every numeric field of every shipped config, replaced by hostile values at random: the parse either
// fails with moxi::error or yields a config inside every limit (the next variant of C2/C3/C4 is caught).
TEST(ModelConfigLimitsTest, RandomNumericMutationsStayInsideTheLimits) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(std::string(MOXI_SOURCE_DIR) + "/configs"))
    if (e.path().extension() == ".json") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  ASSERT_FALSE(names.empty());
  const std::vector<json> hostile = {json(0),
                                     json(-1),
                                     json(1),
                                     json(2),
                                     json(3),
                                     json(32),
                                     json(1e6),
                                     json(int64_t(1) << 31),
                                     json(int64_t(1) << 35),
                                     json(int64_t(1) << 62),
                                     json(INT64_MAX),
                                     json(UINT64_MAX),
                                     json(1e300),
                                     json(-1e300),
                                     json(0.5)};
  int accepted = 0, rejected = 0;
  for (const auto& name : names) {
    const json base = read_json(name);
    // Paths of every number (array elements included).
    std::vector<json::json_pointer> paths;
    std::function<void(const json&, const json::json_pointer&)> walk = [&](const json& j,
                                                                           const json::json_pointer& p) {
      if (j.is_number()) paths.push_back(p);
      if (j.is_object())
        for (const auto& [k, v] : j.items()) walk(v, p / k);
      if (j.is_array())
        for (size_t i = 0; i < j.size(); ++i) walk(j[i], p / i);
    };
    walk(base, json::json_pointer());
    std::mt19937_64 rng(0xc0f1'9ull);
    for (int t = 0; t < 300; ++t) {
      json doc = base;
      const int edits = 1 + int(rng() % 3);
      for (int k = 0; k < edits; ++k) doc[paths[rng() % paths.size()]] = hostile[rng() % hostile.size()];
      try {
        const auto c = parse_model_config(doc, "mutant.json");
        ++accepted;
        EXPECT_LE(c.vocab_size, 16 << 20);
        EXPECT_LE(c.num_layers, 1024);
        EXPECT_LE(c.num_mtp_layers, 16);
        EXPECT_LE(c.max_position_embeddings, kMaxContextTokens);
        EXPECT_LE(c.moe.num_experts * (c.num_layers + c.num_mtp_layers), kMaxRoutedExpertInstances);
        for (const auto& id : {c.bos_token_id, c.eos_token_id, c.pad_token_id})
          if (id) {
            EXPECT_TRUE(*id >= 0 && *id < c.vocab_size) << *id;
          }
      } catch (const moxi::error& e) {
        ++rejected;
        EXPECT_NE(std::string(e.what()).find("mutant.json"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_GT(accepted, 10);
  EXPECT_GT(rejected, 100);
}

// ---- files ----

class ModelConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("moxi-cfg-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ModelConfigFileTest, NonJsonFileNamesThePath) {
  const std::string file = (dir_ / "config.json").string();
  std::ofstream(file) << "{\"hidden_size\": 7168,,, not json";
  try {
    load_model_config(file);
    FAIL() << "parsed a non-JSON file";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("JSON"), std::string::npos) << e.what();
  }
}

TEST_F(ModelConfigFileTest, TopLevelNotAnObject) {
  const std::string file = (dir_ / "config.json").string();
  std::ofstream(file) << "[1, 2, 3]";
  try {
    load_model_config(file);
    FAIL() << "parsed an array";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST_F(ModelConfigFileTest, MissingFileNamesThePath) {
  const std::string file = (dir_ / "no-such-config.json").string();
  try {
    load_model_config(file);
    FAIL() << "loaded a missing file";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  // A directory without config.json names the config.json path it looked for.
  try {
    load_model_config(dir_.string());
    FAIL() << "loaded a directory without config.json";
  } catch (const moxi::error& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "config.json").string()), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moxi::formats
