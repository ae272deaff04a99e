// config.json -> model_config: the fields every model type has (the architecture registry parses the rest,
// model/config.h). Unknown keys and failed checks name the field and the file (config-reader.h).
#include "moxi/formats/model-config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "moxi/base/error.h"
#include "moxi/formats/config-reader.h"
#include "moxi/formats/model-config-validate.h"

namespace moxi::formats {
namespace {

using json = nlohmann::json;

// Fields that describe the file or the Python implementation, not the model math.
void ignore_descriptive_fields(config_reader& r) {
  r.ignore({"model_type", "architectures", "auto_map", "transformers_version", "dtype", "torch_dtype",
            "use_cache", "initializer_range", "_name_or_path", "attention_dropout"});
}

rope_config parse_rope(config_reader& r) {
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

std::optional<quant_config> parse_quant(config_reader& r) {
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

model_config parse_model_config(const nlohmann::json& doc, const std::string& source,
                                const architecture_fields& parse_architecture) {
  validate_model_config(doc, source);  // plausibility limits first: nothing below is sized before them
  config_reader r(doc, source, "");
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

  parse_architecture(r, c);  // the model type's own fields (model/arch/registry.h)
  require_positive(r, "intermediate_size", c.dense_intermediate_size);
  if (c.max_position_embeddings <= 0) r.fail("max_position_embeddings", "required and must be positive");

  c.media_placeholder_token_id = r.opt_int("media_placeholder_token_id");
  if (c.media_placeholder_token_id && !c.vision)
    r.fail("media_placeholder_token_id", "set, but the model has no vision_config");
  if (c.media_placeholder_token_id &&
      (*c.media_placeholder_token_id < 0 || *c.media_placeholder_token_id >= c.vocab_size))
    r.fail("media_placeholder_token_id", "must be a token id in [0, vocab_size)");

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

nlohmann::json read_model_config_json(const std::string& path, std::string* file_out) {
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
  if (file_out) *file_out = file;
  return doc;
}

}  // namespace moxi::formats
