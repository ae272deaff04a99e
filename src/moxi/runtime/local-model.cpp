// local_model loading (stop tokens from config.json, generation_config.json and the template) and
// model_lm, one sequence over the contiguous cache.
#include "moxi/runtime/local-model.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "moxi/base/error.h"
#include "moxi/formats/json-file.h"

namespace moxi::runtime {
namespace fs = std::filesystem;

model_lm::model_lm(const model::model& m)
    : m_(&m), cache_(std::make_unique<model::contiguous_cache>(m.config())) {}

int64_t model_lm::vocab_size() const {
  return m_->config().vocab_size;
}

std::vector<float> model_lm::append(std::span<const token_id> tokens) {
  model::forward_options o;
  o.last_only = true;
  auto logits = m_->forward(tokens, *cache_, o);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  return logits;
}

void model_lm::reset() {
  cache_ = std::make_unique<model::contiguous_cache>(m_->config());
  tokens_.clear();
}

model_lm::snapshot model_lm::save() const {
  return {std::make_shared<const model::contiguous_cache>(*cache_), tokens_};
}

void model_lm::restore(const snapshot& s) {
  if (!s.cache) throw error("model_lm: restore from an empty snapshot");
  cache_ = std::make_unique<model::contiguous_cache>(*s.cache);
  tokens_ = s.tokens;
}

namespace {

// eos_token_id of generation_config.json: an id, a list of ids, or absent.
std::vector<int64_t> generation_config_stops(const std::string& dir) {
  const fs::path path = fs::path(dir) / "generation_config.json";
  std::error_code ec;
  if (!fs::exists(path, ec)) return {};
  const nlohmann::json j = formats::read_json_file(path.string(), "generation config");
  if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return {};
  const auto& e = j["eos_token_id"];
  std::vector<int64_t> ids;
  auto add = [&](const nlohmann::json& v) {
    if (!v.is_number_integer())
      throw error(path.string() + ": eos_token_id must be an integer or a list of them");
    ids.push_back(v.get<int64_t>());
  };
  if (e.is_array()) {
    for (const auto& v : e) add(v);
  } else {
    add(e);
  }
  return ids;
}

}  // namespace

local_model local_model::load(const std::string& dir) {
  auto m = model::model::load(dir);
  auto tok = formats::tokenizer::from_hf_json_file((fs::path(dir) / "tokenizer.json").string());
  auto chat = formats::load_chat_template(dir);
  const int64_t V = m.config().vocab_size;

  std::vector<token_id> stops;
  auto add = [&](int64_t id, const std::string& from) {
    if (id < 0 || id >= V)
      throw error(from + ": stop token id " + std::to_string(id) + " is outside the vocabulary");
    if (std::find(stops.begin(), stops.end(), token_id(id)) == stops.end()) stops.push_back(token_id(id));
  };
  if (const auto& eos = m.config().eos_token_id) add(*eos, m.config().source + " eos_token_id");
  for (int64_t id : generation_config_stops(dir)) add(id, dir + "/generation_config.json");
  auto add_text = [&](std::string_view text) {
    if (text.empty()) return;
    if (auto id = tok.find(text); id && tok.is_special(*id) && *id < V) add(*id, dir + "/tokenizer.json");
  };
  if (chat) add_text(chat->eos_token());
  add_text(formats::kMoxiTinyEndOfTurn);
  return local_model{dir, std::move(m), std::move(tok), std::move(chat), std::move(stops)};
}

const formats::chat_template& local_model::require_chat() const {
  if (!chat) throw error(dir + " has no chat template (tokenizer_config.json with a chat_template)");
  return *chat;
}

std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    const size_t len = c < 0x80             ? 1
                       : (c & 0xE0) == 0xC0 ? 2
                       : (c & 0xF0) == 0xE0 ? 3
                       : (c & 0xF8) == 0xF0 ? 4
                                            : 0;
    if (len > 0 && i + len <= bytes.size() && formats::utf8_valid(bytes.substr(i, len))) {
      out.append(bytes.substr(i, len));
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    }
  }
  return out;
}

}  // namespace moxi::runtime
