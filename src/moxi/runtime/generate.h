// The single-sequence generation loop: prefill the prompt, then sample, stream and decode one token at a
// time until a stop token, a stop string or max_tokens. The model is reached through the small causal_lm
// interface, so the loop is tested with a fake model and the CLI adapts model::model to it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moxi/formats/tokenizer.h"
#include "moxi/runtime/sampler.h"

namespace moxi::runtime {

// A causal language model holding one sequence.
class causal_lm {
 public:
  virtual ~causal_lm() = default;
  virtual int64_t vocab_size() const = 0;
  // Appends tokens to the sequence; returns the logits after the last one, f32 [vocab].
  virtual std::vector<float> append(std::span<const token_id> tokens) = 0;

  // Speculative decoding (docs/speculative.md); a model that cannot draft keeps these defaults.
  // True when the model can propose tokens (an MTP head). prepare_drafts() is called before the first
  // append of a speculative generation, so that the model keeps what drafting needs.
  virtual bool can_draft() const { return false; }
  virtual void prepare_drafts() {}
  // Proposes k >= 1 tokens to follow the held tokens and `next` (sampled, not yet appended): each draft's
  // logits (f32 [vocab]) go to pick, which returns the token drafted. The held tokens do not change.
  virtual void draft(token_id next, int64_t k, const std::function<token_id(std::vector<float>&)>& pick);
  // Appends tokens like append() and returns the logits after each of them (f32 [T, vocab]); keep(n) must
  // follow, and leaves the sequence as if only the first n (1 <= n <= T) had been appended.
  virtual std::vector<float> append_verify(std::span<const token_id> tokens);
  virtual void keep(int64_t n);
};

struct generate_options {
  sampling_params sampling;
  int64_t max_tokens = 128;
  std::vector<token_id> stop_tokens;  // e.g. eos_token_id; ends generation without emitting its text
  std::vector<std::string> stop_strings;
  bool skip_special = true;  // do not print special tokens' text
  // Speculative decoding: tokens drafted per step by the model's MTP head and verified in one forward (0:
  // off; ignored for a model that cannot draft). Greedy output is the same
  // tokens as without it; sampled output has the same distribution.
  int64_t draft_tokens = 0;
  // Record each generated token's log-probability under the model (log-softmax of its logits at
  // temperature 1 over the decodable tokens, whatever the sampling settings), as RL needs. Needs
  // draft_tokens = 0.
  bool logprobs = false;
};

struct generate_result {
  std::vector<token_id> tokens;  // generated ids, the stop token included when one ended generation
  std::vector<float> logprobs;   // per token of `tokens`, when generate_options::logprobs
  std::string finish_reason;     // "stop" or "length"
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;    // prefill: time to the first logits
  double generate_seconds = 0;  // decode steps after the first token
  int64_t drafted = 0;          // speculative decoding: tokens drafted
  int64_t accepted = 0;         // ... and kept by verification
  int64_t verify_steps = 0;     // ... and the verifying forwards
  double prompt_tokens_per_second() const {
    return prompt_seconds > 0 ? double(prompt_tokens) / prompt_seconds : 0;
  }
  // Decode speed: tokens produced by decode steps (all but the first) over their time.
  double generate_tokens_per_second() const {
    return generate_seconds > 0 && tokens.size() > 1 ? double(tokens.size() - 1) / generate_seconds : 0;
  }
};

// Runs the loop; on_text receives the detokenized text as it becomes safe to emit (whole UTF-8 characters,
// never part of a possible stop string). An empty prompt is an error (the model needs a first token).
generate_result generate(causal_lm& lm, const formats::tokenizer& tok, std::span<const token_id> prompt,
                         const generate_options& opts, const std::function<void(std::string_view)>& on_text);

}  // namespace moxi::runtime
