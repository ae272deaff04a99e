// Random initialization. Scales: N(0, initializer_range) for Linear weights and embeddings, divided by
// sqrt(2 * num_layers) for projections that write into the residual stream (GPT-2/Megatron practice),
// ones for norms, zeros for biases and the router correction bias; KDA's A_log = log U(1, 16) and
// dt_bias = softplus^-1(dt) with dt log-uniform in [1e-3, 1e-1] (the Mamba/FLA initialization that
// fla-org/flash-linear-attention uses for its KDA layer); depthwise conv kernels U(+-1/sqrt(W)) (PyTorch's
// Conv1d default with fan_in = W).
#include "moxi/model/init.h"

#include <cmath>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/base/mx.h"
#include "moxi/base/progress.h"
#include "moxi/base/splitmix.h"
#include "moxi/formats/byte-tokenizer.h"
#include "moxi/formats/chat-template.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/convert.h"
#include "moxi/model/manifest.h"

namespace moxi::model {
namespace {

// xoshiro256** seeded from (seed, name): a stream per tensor, so shard layout never changes values.
class rng {
 public:
  rng(uint64_t seed, const std::string& name) {
    uint64_t h = 1469598103934665603ull ^ seed;  // FNV-1a over the name, mixed with the seed
    for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
    for (auto& w : s_) w = splitmix64(h);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9, t = s_[1] << 17;
    s_[2] ^= s_[0], s_[3] ^= s_[1], s_[1] ^= s_[2], s_[0] ^= s_[3], s_[2] ^= t, s_[3] = rotl(s_[3], 45);
    return result;
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double normal() {                                              // Box-Muller; (0, 1] avoids log(0)
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

double initializer_range(const formats::model_config& c) {
  if (c.json.contains("initializer_range") && c.json["initializer_range"].is_number())
    return c.json["initializer_range"].get<double>();
  return 0.02;
}

}  // namespace

void init_values(const formats::model_config& c, const tensor_decl& d, uint64_t seed, float* out) {
  rng r(seed, d.name);
  const size_t n = size_t(d.numel());
  const double std = initializer_range(c);
  switch (d.init) {
    case init_kind::NORMAL:
      for (size_t i = 0; i < n; ++i) out[i] = float(std * r.normal());
      return;
    case init_kind::NORMAL_OUT: {
      const double s = std / std::sqrt(2.0 * double(c.num_layers));
      for (size_t i = 0; i < n; ++i) out[i] = float(s * r.normal());
      return;
    }
    case init_kind::ONES:
      for (size_t i = 0; i < n; ++i) out[i] = 1.0f;
      return;
    case init_kind::ZEROS:
      for (size_t i = 0; i < n; ++i) out[i] = 0.0f;
      return;
    case init_kind::CONV: {
      const double bound = 1.0 / std::sqrt(double(d.shape.back()));
      for (size_t i = 0; i < n; ++i) out[i] = float(bound * (2.0 * r.uniform() - 1.0));
      return;
    }
    case init_kind::KDA_A_LOG:
      for (size_t i = 0; i < n; ++i) out[i] = float(std::log(1.0 + 15.0 * r.uniform()));
      return;
    case init_kind::KDA_DT_BIAS:
      for (size_t i = 0; i < n; ++i) {
        const double dt = std::exp(std::log(1e-3) + (std::log(1e-1) - std::log(1e-3)) * r.uniform());
        out[i] = float(dt + std::log(-std::expm1(-dt)));  // inverse of softplus
      }
      return;
  }
}

void init_checkpoint(const formats::model_config& c, const std::string& out_dir, const init_options& o) {
  if (o.float_type != dtype::BF16 && o.float_type != dtype::F32)
    throw error("init: --dtype must be bf16 or f32");
  if (c.quant && c.quant->method == formats::quant_method::FP8_BLOCK)
    throw error(c.source + ": init writes BF16/F32 or MXFP4 checkpoints; remove the FP8 quantization_config");
  const auto manifest = build_manifest(c);
  auto layout = storage_layout(c, manifest, o.float_type);
  if (o.only_group)
    std::erase_if(layout, [&](const stored_tensor& s) { return manifest[s.decl_index].group != *o.only_group; });
  std::vector<formats::tensor_spec> specs;
  uint64_t total = 0;
  for (const auto& s : layout) {
    specs.push_back({s.name, s.type, s.shape});
    total += s.nbytes();
  }
  formats::checkpoint_writer writer(out_dir, specs, o.num_shards,
                                    {{"format", "pt"}, {"producer", "moxi init"}});
  writer.add_file("config.json", c.json.dump(2) + "\n");
  // A byte-level tokenizer makes the random checkpoint promptable with text (no merges: one token per byte).
  std::map<int64_t, std::string> specials;
  if (c.pad_token_id) specials[*c.pad_token_id] = "<|pad|>";
  if (c.bos_token_id) specials[*c.bos_token_id] = "<|bos|>";
  if (c.eos_token_id) specials[*c.eos_token_id] = "<|eos|>";
  if (c.media_placeholder_token_id) specials[*c.media_placeholder_token_id] = "<|media_pad|>";  // Kimi-VL's
  if (c.vocab_size >= 256 + int64_t(specials.size())) {
    // With room for them, moxi-tiny's chat specials take the top ids and the checkpoint gets that chat
    // template (tokenizer_config.json) and <|end|> as a stop token (generation_config.json), so chat, eval
    // and the server can talk to any random checkpoint the way they talk to a trained one.
    const int64_t num_chat = int64_t(std::size(formats::kMoxiTinyChatSpecials));
    bool chat = c.vocab_size >= 256 + int64_t(specials.size()) + num_chat;
    for (int64_t i = 0; chat && i < num_chat; ++i) chat = !specials.count(c.vocab_size - num_chat + i);
    if (chat) {
      for (int64_t i = 0; i < num_chat; ++i)
        specials[c.vocab_size - num_chat + i] = formats::kMoxiTinyChatSpecials[i];
    }
    writer.add_file("tokenizer.json", formats::byte_level_tokenizer_json(c.vocab_size, specials));
    if (chat) {
      const auto name = [&](const std::optional<int64_t>& id) -> nlohmann::json {
        return id ? nlohmann::json(specials.at(*id)) : nlohmann::json(nullptr);
      };
      nlohmann::json stops = nlohmann::json::array();
      if (c.eos_token_id) stops.push_back(*c.eos_token_id);
      static_assert(std::string_view(formats::kMoxiTinyChatSpecials[3]) == formats::kMoxiTinyEndOfTurn);
      stops.push_back(c.vocab_size - 1);  // <|end|>, the last chat special
      const nlohmann::json tok_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                         {"bos_token", name(c.bos_token_id)},
                                         {"eos_token", name(c.eos_token_id)},
                                         {"pad_token", name(c.pad_token_id)},
                                         {"clean_up_tokenization_spaces", false},
                                         {"chat_template", std::string(formats::moxi_tiny_chat_template())}};
      nlohmann::json gen_config = {{"eos_token_id", stops}};
      if (c.bos_token_id) gen_config["bos_token_id"] = *c.bos_token_id;
      if (c.pad_token_id) gen_config["pad_token_id"] = *c.pad_token_id;
      writer.add_file("tokenizer_config.json", tok_config.dump(2) + "\n");
      writer.add_file("generation_config.json", gen_config.dump(2) + "\n");
    }
  }

  progress bar("init", total, /*bytes=*/true);
  std::vector<float> values;
  std::vector<unsigned char> bytes, scales;
  for (size_t i = 0; i < layout.size(); ++i) {
    const stored_tensor& s = layout[i];
    const tensor_decl& d = manifest[s.decl_index];
    if (s.kind == stored_tensor::role::MX_SCALES) continue;  // written with its blocks
    values.resize(size_t(d.numel()));
    init_values(c, d, o.seed, values.data());
    if (s.kind == stored_tensor::role::MX_BLOCKS) {
      // Rows are contiguous and K % 32 == 0, so quantizing the flat tensor equals quantizing row by row.
      bytes.resize(values.size() / 2);
      scales.resize(values.size() / 32);
      mx::quantize_mxfp4(values.data(), values.size(), bytes.data(), scales.data());
      writer.write(s.name, bytes.data(), bytes.size());
      MOXI_ASSERT(i + 1 < layout.size() && layout[i + 1].kind == stored_tensor::role::MX_SCALES);
      writer.write(layout[i + 1].name, scales.data(), scales.size());
      if (o.show_progress) bar.advance(bytes.size() + scales.size(), s.name);
    } else {
      bytes.resize(s.nbytes());
      formats::from_f32(s.type, values.data(), values.size(), bytes.data());
      writer.write(s.name, bytes.data(), bytes.size());
      if (o.show_progress) bar.advance(bytes.size(), s.name);
    }
  }
  writer.commit();
  if (o.show_progress) bar.finish();
}

}  // namespace moxi::model
