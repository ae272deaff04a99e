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
};

struct generate_options {
  sampling_params sampling;
  int64_t max_tokens = 128;
  std::vector<token_id> stop_tokens;  // e.g. eos_token_id; ends generation without emitting its text
  std::vector<std::string> stop_strings;
  bool skip_special = true;  // do not print special tokens' text
};

struct generate_result {
  std::vector<token_id> tokens;  // generated ids, the stop token included when one ended generation
  std::string finish_reason;     // "stop" or "length"
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0;    // prefill: time to the first logits
  double generate_seconds = 0;  // decode steps after the first token
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
