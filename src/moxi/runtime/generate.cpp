// Generation loop: one prefill call, then one append per sampled token (the decode path of the model).
#include "moxi/runtime/generate.h"

#include <chrono>
#include <limits>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"

namespace moxi::runtime {

generate_result generate(causal_lm& lm, const formats::tokenizer& tok, std::span<const token_id> prompt,
                         const generate_options& opts, const std::function<void(std::string_view)>& on_text) {
  if (prompt.empty()) throw error("generate: the prompt has no tokens");
  if (opts.max_tokens < 0) throw error("generate: max_tokens must be >= 0");
  validate(opts.sampling);
  using clock = std::chrono::steady_clock;
  generate_result r;
  r.prompt_tokens = int64_t(prompt.size());
  r.finish_reason = "length";
  if (opts.max_tokens == 0) return r;

  sampler s(opts.sampling, prompt);
  formats::stream_decoder dec(tok, opts.skip_special);
  stop_checker stops(opts.stop_strings, opts.stop_tokens);
  auto emit = [&](const std::string& text) {
    if (!text.empty()) on_text(text);
  };

  // Model vocabularies are often padded beyond the tokenizer (and random checkpoints use every id): ids the
  // tokenizer cannot decode are never sampled.
  const int64_t V = lm.vocab_size();
  std::vector<token_id> undecodable;
  for (int64_t id = 0; id < V; ++id)
    if (id >= tok.vocab_size() || tok.token_bytes(token_id(id)).empty()) undecodable.push_back(token_id(id));
  auto mask = [&](std::vector<float>& l) {
    if (int64_t(l.size()) != V) throw error("generate: the model returned a wrong logits size");
    for (token_id id : undecodable) l[size_t(id)] = -std::numeric_limits<float>::infinity();
  };

  auto t0 = clock::now();
  std::vector<float> logits = lm.append(prompt);
  r.prompt_seconds = seconds_since(t0);
  const auto t1 = clock::now();
  for (int64_t i = 0; i < opts.max_tokens; ++i) {
    mask(logits);
    const token_id id = s.sample(logits);
    s.accept(id);
    r.tokens.push_back(id);
    const auto step = stops.push(id, dec.push(id));
    emit(step.text);
    if (step.stopped) {
      r.finish_reason = "stop";
      break;
    }
    if (i + 1 == opts.max_tokens) break;  // no logits needed after the last token
    const token_id next[] = {id};
    logits = lm.append(next);
  }
  r.generate_seconds = seconds_since(t1);
  if (r.finish_reason != "stop") {
    // Bytes of an incomplete character go through the stop checker too, then whatever it still holds.
    const auto tail = stops.push(-1, dec.flush());
    emit(tail.text);
    emit(stops.flush());
  }
  return r;
}

}  // namespace moxi::runtime
