// A model directory loaded for text generation (weights, tokenizer, chat template, stop tokens) and one
// sequence of it behind the generation loop's causal_lm interface: what `moxi generate`, `moxi chat` and
// `moxi eval` (moxi::eval::evaluate) run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moxi/formats/chat-template.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/model/cache.h"
#include "moxi/model/model.h"
#include "moxi/runtime/generate.h"

namespace moxi::runtime {

// One sequence of a model::model. model::model::forward is const and keeps all per-sequence state in the
// cache (its kernels' scratch is thread_local), so several model_lm over one model may run on different
// threads at once.
class model_lm final : public causal_lm {
 public:
  explicit model_lm(const model::model& m);

  int64_t vocab_size() const override;
  // Runs the tokens after the ones held; returns the logits after the last one.
  std::vector<float> append(std::span<const token_id> tokens) override;

  // Speculative decoding with the model's MTP head (docs/speculative.md): after prepare_drafts() the
  // sequence keeps the main model's last hidden states that the MTP layer has not read yet; draft() runs
  // the MTP layer over them (its own cache catches up) and chains it for k > 1; append_verify() runs the
  // drafts under a cache trace, and keep() rewinds the cache to the tokens kept.
  bool can_draft() const override;
  void prepare_drafts() override;
  void draft(token_id next, int64_t k, const std::function<token_id(std::vector<float>&)>& pick) override;
  std::vector<float> append_verify(std::span<const token_id> tokens) override;
  void keep(int64_t n) override;

  // Image features (runtime/multimodal.h) of the sequence's image placeholder tokens in order from its
  // start, f32 [n, hidden]: each append() gives its placeholders the rows after those of the placeholders
  // already held, so a restored snapshot or a reset() sequence re-run from the start finds its rows again.
  void set_media(std::vector<float> rows) { media_ = std::move(rows); }

  // The tokens the sequence holds, in order.
  const std::vector<token_id>& tokens() const { return tokens_; }
  // Empties the sequence.
  void reset();

  // A copy of the whole sequence state (cache and tokens), O(cache bytes): KDA's recurrent state cannot
  // be rolled back, so a caller that may want to return to a point keeps a snapshot of it.
  struct snapshot {
    std::shared_ptr<const model::contiguous_cache> cache;
    std::vector<token_id> tokens;
    std::vector<float> pending_hidden;
  };
  snapshot save() const;
  void restore(const snapshot& s);

 private:
  // Runs tokens on the main model (hidden: their post-norm hidden states, when not null).
  std::vector<float> run(std::span<const token_id> tokens, bool all_logits, std::vector<float>* hidden);

  const model::model* m_;
  std::unique_ptr<model::contiguous_cache> cache_;
  std::vector<token_id> tokens_;
  std::vector<float> media_;  // set_media()
  // Drafting: the main model's post-norm hidden states f32 [length - mtp_length, hidden] of the positions
  // the MTP layer has not run yet, and those of the last append_verify until keep().
  bool drafts_ = false;
  std::vector<float> pending_hidden_, verify_hidden_;
  int64_t verify_from_ = -1;  // cache length before the last append_verify, -1 when none is open
};

// A model directory: config.json + safetensors, tokenizer.json, and optionally tokenizer_config.json
// (chat template) and generation_config.json (stop tokens).
struct local_model {
  std::string dir;
  model::model model;
  formats::tokenizer tok;
  std::optional<formats::chat_template> chat;  // nullopt for a base model without a template
  // Tokens that end a reply: eos_token_id of config.json and generation_config.json (an id or a list),
  // the template's eos token and moxi-tiny's end-of-turn token <|end|> when the tokenizer has them.
  std::vector<token_id> stop_tokens;

  static local_model load(const std::string& dir, const model::load_options& opts = {});

  // The chat template, or a moxi::error naming the directory when it has none.
  const formats::chat_template& require_chat() const;
};

// Model output as text that JSON and the tokenizer accept: each byte that is not part of well-formed
// UTF-8 becomes U+FFFD (a random or truncated reply may end inside a character).
std::string to_valid_utf8(std::string_view bytes);

}  // namespace moxi::runtime
