// ModelConfig: an HF-style config.json (Kimi-Linear field names, DeepSeek-V3.2 names for the DSA indexer
// and DeepSeek configs) parsed into one typed, validated structure that every other layer reads. This
// layer parses the fields every model type has; each architecture's own fields are parsed by its entry in
// the model layer's registry (model/arch/registry.h), the only switch on model_type.
// Layer lists are 1-based in the file and 0-based here. Unknown or contradictory fields are errors that
// name the field (docs/model-spec.md §2); fields that only describe the file (transformers_version, ...)
// are accepted and ignored.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace moxi::formats {

// The attention of one layer. model/layers/attention.h holds what each kind computes, caches and costs;
// memory/cache-spec.h how its cache is managed.
enum class attn_kind : uint8_t {
  KDA,  // Kimi Delta Attention (linear attention, constant-size state)
  MLA,  // (gated) multi-head latent attention; Gated DSA when model_config::dsa is set
  SWA,  // sliding-window softmax attention (GQA, RoPE): each query sees the last `window` keys incl. itself
};
// HF layer_types names: "linear_attention", "full_attention", "sliding_attention".
const char* attn_kind_name(attn_kind kind);

enum class kda_gate_kind : uint8_t {
  SOFTPLUS,     // g = -exp(A_log) * softplus(f_b(f_a(x)) + dt_bias)          (Kimi-Linear)
  LOWER_BOUND,  // g = lower_bound * sigmoid(exp(A_log) * (f_b(f_a(x)) + dt_bias))  (seed, K3)
};

enum class router_score : uint8_t { SIGMOID, SOFTMAX };

struct kda_config {
  int64_t num_heads = 0;
  int64_t head_dim = 0;  // K = V = head_dim
  int64_t conv_kernel = 0;
  kda_gate_kind gate = kda_gate_kind::SOFTPLUS;
  double gate_lower_bound = 0;         // only for LOWER_BOUND
  bool full_rank_output_gate = false;  // g_proj (hidden -> H*D) instead of g_b(g_a(x))
  int64_t proj_dim() const { return num_heads * head_dim; }
};

struct mla_config {
  int64_t num_heads = 0;
  std::optional<int64_t> q_lora_rank;  // nullopt: q_proj directly from the hidden state
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool use_nope = false;     // no rotary embedding at all (Kimi-Linear, seed)
  bool output_gate = false;  // elementwise sigmoid gate g_proj before o_proj (the "Gated" of Gated DSA)
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
};

struct dsa_config {
  int64_t index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
};

// Sliding-window attention (Mistral / Gemma 2-3 / gpt-oss style GQA): q_proj [H*D, hidden], k_proj and
// v_proj [KVH*D, hidden], o_proj [hidden, H*D], half-split (NeoX) RoPE over the whole head, softmax scale
// D^-0.5. Fields: sliding_window, num_attention_heads, num_key_value_heads, head_dim.
struct swa_config {
  int64_t window = 0;  // W: query at position p sees keys at positions (p - W, p]
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // divides num_heads
  int64_t head_dim = 0;
  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
};

struct rope_config {
  double theta = 10000.0;
  bool yarn = false;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

struct moe_config {
  int64_t num_experts = 0;  // routed experts; 0 means a dense model
  int64_t experts_per_token = 0;
  int64_t num_shared_experts = 0;
  int64_t intermediate_size = 0;       // per routed (and shared) expert
  std::optional<int64_t> latent_size;  // latent MoE: routed experts run in this width
  bool latent_norm = false;            // RMSNorm after the down-projection into the latent
  router_score score = router_score::SIGMOID;
  bool renormalize = true;
  double routed_scaling_factor = 1.0;
  int64_t num_groups = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense = 0;
  int64_t layer_freq = 1;
  int64_t expert_width(int64_t hidden) const { return latent_size ? *latent_size : hidden; }
};

enum class quant_method : uint8_t {
  MXFP4,      // routed experts as MXFP4 *_blocks/*_scales (gpt-oss layout), everything else BF16
  FP8_BLOCK,  // DeepSeek-style F8_E4M3 weights with a scale per weight block (read for planning)
};

enum class act_format : uint8_t { BF16, MXFP8_E4M3, MXFP8_E5M2 };

struct quant_config {
  quant_method method = quant_method::MXFP4;
  act_format activations = act_format::BF16;  // what the inputs of quantized GEMMs are rounded to
  int64_t block_size = 32;                    // MX block along K
  std::vector<int64_t> weight_block_size;     // FP8_BLOCK only: [rows, cols]
};

// MoonViT-style vision tower + 2x2 patch merger + MLP projector (docs/kimi-linear.md §5).
struct vision_config {
  int64_t patch_size = 14;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t intermediate_size = 0;
  int64_t pos_emb_height = 64;
  int64_t pos_emb_width = 64;
  int64_t merge_kernel = 2;  // merge_kernel x merge_kernel patches -> one token
};

struct model_config {
  std::string source;        // file the config came from, for messages
  std::string model_type;    // "kimi_linear", "deepseek_v32", "deepseek_v3"
  std::string architecture;  // architectures[0]
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t dense_intermediate_size = 0;  // FFN width of the dense (non-MoE) layers
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";
  std::vector<attn_kind> layer_attn;  // one per layer, 0-based
  std::optional<kda_config> kda;      // set iff any layer is KDA
  std::optional<mla_config> mla;      // set iff any layer is MLA
  std::optional<dsa_config> dsa;      // set: every MLA layer is a Gated DSA layer
  std::optional<swa_config> swa;      // set iff any layer is SWA
  rope_config rope;
  moe_config moe;
  int64_t num_mtp_layers = 0;
  std::optional<quant_config> quant;
  std::optional<vision_config> vision;
  std::optional<int64_t> bos_token_id, eos_token_id, pad_token_id;
  // The image placeholder token (Kimi-VL's <|media_pad|>): each one in a prompt takes one row of image
  // features (model/vision.h). Set only with a vision_config.
  std::optional<int64_t> media_placeholder_token_id;
  nlohmann::json json;  // the document as read (written back verbatim by init/quantize)

  bool is_kda(int64_t layer) const { return layer_attn.at(size_t(layer)) == attn_kind::KDA; }
  bool is_moe(int64_t layer) const {
    return moe.num_experts > 0 && layer >= moe.first_k_dense && layer % moe.layer_freq == 0;
  }
  int64_t num_layers_of(attn_kind kind) const;
  int64_t num_kda_layers() const { return num_layers_of(attn_kind::KDA); }
  int64_t num_mla_layers() const { return num_layers_of(attn_kind::MLA); }
  int64_t num_swa_layers() const { return num_layers_of(attn_kind::SWA); }
};

class config_reader;  // config-reader.h
// Reads the fields of one model type into `config`, whose model_type, common fields (sizes, special
// tokens, MTP count, rope) and source are already set; unknown keys are reported after it returns.
using architecture_fields = std::function<void(config_reader& r, model_config& config)>;

// Parses and validates `doc`: the plausibility limits (model-config-validate.h), the fields every model
// type has, `parse_architecture` for the rest, then the quantization block and the unknown-key check.
// `source` names the file in error messages. Tools read configs through model::load_model_config
// (model/config.h), which supplies the architecture registry's parser.
model_config parse_model_config(const nlohmann::json& doc, const std::string& source,
                                const architecture_fields& parse_architecture);
// Reads PATH, or PATH/config.json when PATH is a directory, as JSON (at most 64 MiB); the file read goes
// to *file when given.
nlohmann::json read_model_config_json(const std::string& path, std::string* file = nullptr);

}  // namespace moxi::formats
