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
    : m_(&m), cache_(m.new_cache()) {}

int64_t model_lm::vocab_size() const {
  return m_->config().vocab_size;
}

std::vector<float> model_lm::run(std::span<const token_id> tokens, bool all_logits, std::vector<float>* hidden) {
  if (verify_from_ >= 0) throw error("model_lm: append while a draft verification is open (keep() first)");
  model::forward_options o;
  o.last_only = !all_logits;
  o.hidden = hidden;
  if (!media_.empty()) {
    // This call's placeholders take the rows after those of the placeholders already held; placeholders
    // past the last row (ones the model wrote) keep their embedding.
    const auto pad = m_->config().media_placeholder_token_id;
    const int64_t d = m_->config().hidden_size, rows = int64_t(media_.size()) / d;
    auto count = [&](std::span<const token_id> t) { return pad ? int64_t(std::count(t.begin(), t.end(), *pad)) : 0; };
    const int64_t before = std::min(count(tokens_), rows), n = std::min(count(tokens), rows - before);
    o.media = std::span(media_).subspan(size_t(before * d), size_t(n * d));
  }
  auto logits = m_->forward(tokens, *cache_, o);
  tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  return logits;
}

std::vector<float> model_lm::append(std::span<const token_id> tokens) {
  if (!drafts_) return run(tokens, false, nullptr);
  std::vector<float> hidden;
  auto logits = run(tokens, false, &hidden);
  pending_hidden_.insert(pending_hidden_.end(), hidden.begin(), hidden.end());
  return logits;
}

bool model_lm::can_draft() const {
  return m_->config().num_mtp_layers > 0;
}

void model_lm::prepare_drafts() {
  if (!can_draft()) throw error("model_lm: the model has no MTP layer to draft with");
  if (drafts_) return;
  // The MTP layer reads the main model's hidden state of every position; positions run before now would
  // have to be run again, so drafting starts on an empty sequence (or one prepared from its start).
  if (!tokens_.empty()) throw error("model_lm: prepare_drafts() on a sequence that already holds tokens");
  drafts_ = true;
}

void model_lm::draft(token_id next, int64_t k, const std::function<token_id(std::vector<float>&)>& pick) {
  if (!drafts_) throw error("model_lm: draft() before prepare_drafts()");
  if (k < 1) throw error("model_lm: draft() needs k >= 1");
  if (verify_from_ >= 0) throw error("model_lm: draft() while a verification is open");
  const int64_t L = cache_->length(), M = cache_->mtp_length(), d = m_->config().hidden_size;
  MOXI_ASSERT(int64_t(pending_hidden_.size()) == (L - M) * d, "pending hidden states out of step");
  if (L == 0) throw error("model_lm: draft() on an empty sequence");
  // Everything from here on can be taken back: the chained MTP positions always are, the verified tokens
  // partly (keep()).
  cache_->begin_trace();
  // MTP position i reads (h_i, t_{i+1}): the pending positions M..L-1, whose next tokens are the held ones
  // after M and `next`. Its last row predicts the token after `next`.
  std::vector<token_id> after(tokens_.begin() + M + 1, tokens_.end());
  after.push_back(next);
  model::forward_options o;
  o.last_only = true;
  std::vector<float> h;
  o.hidden = &h;
  std::vector<float> logits = m_->mtp_forward(pending_hidden_, after, *cache_, 0, o);
  pending_hidden_.clear();
  token_id t = pick(logits);
  // Chained drafts feed the MTP layer its own last hidden state in place of the main model's (which the
  // drafts do not have yet), as one-layer MTP decoders do for k > 1.
  for (int64_t i = 1; i < k; ++i) {
    const std::vector<float> last(h.end() - d, h.end());
    const token_id one[] = {t};
    logits = m_->mtp_forward(last, one, *cache_, 0, o);
    t = pick(logits);
  }
}

std::vector<float> model_lm::append_verify(std::span<const token_id> tokens) {
  if (!drafts_ || !cache_->tracing()) throw error("model_lm: append_verify() without a draft() before it");
  const int64_t L = cache_->length();
  auto logits = run(tokens, true, &verify_hidden_);
  verify_from_ = L;
  return logits;
}

void model_lm::keep(int64_t n) {
  if (verify_from_ < 0) throw error("model_lm: keep() without append_verify()");
  const int64_t T = cache_->length() - verify_from_, d = m_->config().hidden_size;
  if (n < 1 || n > T) throw error("model_lm: keep(" + std::to_string(n) + ") of " + std::to_string(T) + " tokens");
  // The MTP layer keeps the positions up to verify_from_ - 1 (read with their true hidden states); the
  // chained positions after them go.
  cache_->rewind(verify_from_ + n, verify_from_);
  cache_->end_trace();
  tokens_.resize(size_t(verify_from_ + n));
  pending_hidden_.assign(verify_hidden_.begin(), verify_hidden_.begin() + n * d);
  verify_hidden_.clear();
  verify_from_ = -1;
}

void model_lm::reset() {
  cache_ = m_->new_cache();
  tokens_.clear();
  pending_hidden_.clear();
  verify_hidden_.clear();
  verify_from_ = -1;
}

model_lm::snapshot model_lm::save() const {
  if (verify_from_ >= 0) throw error("model_lm: save() while a draft verification is open");
  return {std::make_shared<const model::contiguous_cache>(*cache_), tokens_, pending_hidden_};
}

void model_lm::restore(const snapshot& s) {
  if (!s.cache) throw error("model_lm: restore from an empty snapshot");
  cache_ = std::make_unique<model::contiguous_cache>(*s.cache);
  tokens_ = s.tokens;
  pending_hidden_ = s.pending_hidden;
  verify_hidden_.clear();
  verify_from_ = -1;
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

local_model local_model::load(const std::string& dir, const model::load_options& opts) {
  auto m = model::model::load(dir, opts);
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
