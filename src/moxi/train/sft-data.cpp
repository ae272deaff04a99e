// SFT samples, batches and their deterministic order (see sft-data.h).
#include "moxi/train/sft-data.h"

#include <algorithm>
#include <numeric>

#include "moxi/base/error.h"
#include "moxi/base/splitmix.h"
#include "moxi/eval/evaluate.h"
#include "moxi/eval/task-generator.h"

namespace moxi::train {

namespace {

// Fisher-Yates with a portable generator (no std:: distributions: their output differs between libraries).
template <class T>
void shuffle(std::vector<T>& v, uint64_t& state) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[splitmix64(state) % i]);
}

std::vector<int64_t> to_ids(const std::vector<token_id>& ids) {
  return {ids.begin(), ids.end()};
}

}  // namespace

namespace {

using ojson = nlohmann::ordered_json;

// The reply the template renders for the last message of `with` (an assistant turn) after the generation
// prompt `prompt` of the messages before it: what the rendered conversation has past the point where it
// departs from the prompt, cut after the end-of-turn marker. A template may end its generation prompt with
// text the rendered turn does not repeat (moxi-tiny's "<|assistant|>\n" vs "<|assistant|>content"); the
// model is trained after the prompt it gets at inference.
std::string reply_after(const std::string& prompt, const std::string& full, const formats::chat_template& tpl,
                        const eval::task& t, const std::string& end) {
  size_t common = 0;
  while (common < prompt.size() && common < full.size() && prompt[common] == full[common]) ++common;
  if (prompt.find_first_not_of(" \t\r\n", common) != std::string::npos)
    throw error(
        tpl.source() + ": the conversation of task " + t.id +
        " departs from its generation prompt before the reply, so the reply cannot be located (prompt " +
        nlohmann::json(prompt).dump() + ", conversation " + nlohmann::json(full).dump() + ")");
  std::string reply = full.substr(common);
  const auto at = reply.find(end);
  if (at == std::string::npos)
    throw error(tpl.source() + ": the reply of task " + t.id + " has no end-of-turn marker '" + end +
                "' after the generation prompt (prompt " + nlohmann::json(prompt).dump() + ", conversation " +
                nlohmann::json(full).dump() + ")");
  reply.resize(at + end.size());
  return reply;
}

}  // namespace

std::vector<chat_segment> render_chat(const eval::task& t, const formats::chat_template& tpl,
                                      const std::string& end) {
  ojson messages = ojson::array();
  for (const auto& m : t.history) messages.push_back({{"role", m.role}, {"content", m.content}});
  messages.push_back({{"role", "user"}, {"content", eval::task_user_content(t)}});
  messages.push_back({{"role", "assistant"}, {"content", t.reference}});

  formats::render_options gen;
  gen.add_generation_prompt = true;
  std::vector<chat_segment> all;
  std::string consumed;  // the text of `all`
  bool consistent = true;
  std::string prompt, reply;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const ojson before(messages.begin(), messages.begin() + ptrdiff_t(i));
    const ojson with(messages.begin(), messages.begin() + ptrdiff_t(i) + 1);
    prompt = tpl.render(before, gen);
    reply = reply_after(prompt, tpl.render(with), tpl, t, end);
    if (prompt.compare(0, consumed.size(), consumed) != 0) consistent = false;
    if (!consistent) continue;
    all.push_back({prompt.substr(consumed.size()), false});
    all.push_back({reply, true});
    consumed = prompt + reply;
  }
  if (consistent) return all;
  return {{prompt, false}, {reply, true}};
}

std::optional<sample_vision> sample_vision_of(const formats::model_config& c) {
  if (!c.vision || !c.media_placeholder_token_id) return std::nullopt;
  sample_vision v;
  v.pre.patch_size = c.vision->patch_size;
  v.pre.merge_kernel = c.vision->merge_kernel;
  v.placeholder = *c.media_placeholder_token_id;
  return v;
}

namespace {

image::patches picture(const std::string& png, const image::preprocess_config& pre, const std::string& what) {
  return image::preprocess(image::decode(png, {}, what), pre);
}

}  // namespace

sft_sample make_sample(const eval::task& t, const formats::chat_template& tpl, const formats::tokenizer& tok,
                       const std::string& end, const sample_vision* vision) {
  sft_sample s;
  s.domain = t.domain;
  for (const auto& seg : render_chat(t, tpl, end)) {
    const auto ids = to_ids(tok.encode(seg.text));
    s.tokens.insert(s.tokens.end(), ids.begin(), ids.end());
    s.target.resize(s.tokens.size(), seg.trained ? 1 : 0);
  }
  if (t.images.empty()) return s;
  if (!vision) throw error("task " + t.id + " has pictures, but the model has no vision encoder");
  // Each image's one placeholder becomes one per image token.
  std::vector<int64_t> tokens;
  std::vector<uint8_t> target;
  size_t k = 0;
  for (size_t j = 0; j < s.tokens.size(); ++j) {
    if (s.tokens[j] != vision->placeholder || k >= t.images.size()) {
      tokens.push_back(s.tokens[j]);
      target.push_back(s.target[j]);
      continue;
    }
    const auto p = picture(t.images[k], vision->pre, "task " + t.id + " image " + std::to_string(k + 1));
    tokens.insert(tokens.end(), size_t(p.tokens(vision->pre.merge_kernel)), vision->placeholder);
    target.insert(target.end(), size_t(p.tokens(vision->pre.merge_kernel)), 0);
    ++k;
  }
  if (k != t.images.size())
    throw error("task " + t.id + ": the chat template wrote " + std::to_string(k) + " image placeholder(s) for " +
                std::to_string(t.images.size()) + " picture(s)");
  s.tokens = std::move(tokens);
  s.target = std::move(target);
  s.images = t.images;
  return s;
}

std::vector<model::image_input> sft_batch::image_inputs() const {
  std::vector<model::image_input> in;
  for (const auto& p : images) in.push_back({p.grid_h, p.grid_w, p.pixels});
  return in;
}

sft_batch make_batch(const std::vector<const sft_sample*>& rows, int64_t pad_id, const sample_vision* vision,
                     int64_t length) {
  if (rows.empty()) throw error("make_batch: no rows");
  int64_t T = length;
  for (const auto* r : rows) T = std::max<int64_t>(T, int64_t(r->tokens.size()));
  const int64_t B = int64_t(rows.size());
  sft_batch b;
  b.tokens = torch::full({B, T}, pad_id, torch::kInt64);
  b.masks.target = torch::zeros({B, T}, torch::kFloat32);
  b.masks.valid = torch::zeros({B, T}, torch::kBool);
  auto tok = b.tokens.accessor<int64_t, 2>();
  auto tgt = b.masks.target.accessor<float, 2>();
  auto val = b.masks.valid.accessor<bool, 2>();
  for (int64_t i = 0; i < B; ++i) {
    const auto& r = *rows[size_t(i)];
    for (size_t j = 0; j < r.tokens.size(); ++j) {
      tok[i][int64_t(j)] = r.tokens[j];
      tgt[i][int64_t(j)] = float(r.target[j]);
      val[i][int64_t(j)] = true;
      b.targets += r.target[j];
    }
    b.tokens_real += int64_t(r.tokens.size());
    for (const auto& png : r.images) {
      if (!vision) throw error("make_batch: a sample has pictures, but the model has no vision encoder");
      b.images.push_back(picture(png, vision->pre, "a picture"));
    }
  }
  return b;
}

batch_order::batch_order(std::vector<int64_t> lengths, int64_t batch_size, uint64_t seed)
    : lengths_(std::move(lengths)), batch_size_(batch_size), seed_(seed) {
  if (lengths_.empty()) throw error("batch_order: no samples");
  if (batch_size_ < 1) throw error("batch_order: batch size must be >= 1");
  per_epoch_ = (int64_t(lengths_.size()) + batch_size_ - 1) / batch_size_;
}

void batch_order::build_epoch(int64_t epoch) {
  uint64_t state = seed_ * 0x9e3779b97f4a7c15ull ^ (uint64_t(epoch) + 1) * 0xd1b54a32d192ed03ull;
  std::vector<size_t> idx(lengths_.size());
  std::iota(idx.begin(), idx.end(), size_t(0));
  shuffle(idx, state);
  const size_t chunk = size_t(batch_size_) * 32;
  for (size_t at = 0; at < idx.size(); at += chunk) {
    const auto e = idx.begin() + ptrdiff_t(std::min(idx.size(), at + chunk));
    std::stable_sort(idx.begin() + ptrdiff_t(at), e,
                     [&](size_t a, size_t b) { return lengths_[a] < lengths_[b]; });
  }
  epoch_batches_cache_.clear();
  for (size_t at = 0; at < idx.size(); at += size_t(batch_size_))
    epoch_batches_cache_.emplace_back(
        idx.begin() + ptrdiff_t(at), idx.begin() + ptrdiff_t(std::min(idx.size(), at + size_t(batch_size_))));
  shuffle(epoch_batches_cache_, state);
  cached_epoch_ = epoch;
}

std::vector<size_t> batch_order::batch(int64_t step) {
  const int64_t epoch = step / per_epoch_;
  if (epoch != cached_epoch_) build_epoch(epoch);
  return epoch_batches_cache_[size_t(step % per_epoch_)];
}

std::vector<eval::task> load_tasks(const data_source& s) {
  if (!s.file.empty()) return eval::read_jsonl(s.file);
  return eval::generate_tasks(eval::parse_domain(s.domain), eval::parse_split(s.split), size_t(s.n), s.seed,
                              s.templates, s.options);
}

}  // namespace moxi::train
