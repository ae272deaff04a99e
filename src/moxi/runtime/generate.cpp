// Generation loop: one prefill call, then one append per sampled token (the decode path of the model).
#include "moxi/runtime/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "moxi/base/clock.h"
#include "moxi/base/error.h"
#include "moxi/runtime/speculative.h"

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

  // Records an output token and emits its text; true when it ends the generation.
  auto push = [&](token_id id) {
    s.accept(id);
    r.tokens.push_back(id);
    const auto step = stops.push(id, dec.push(id));
    emit(step.text);
    if (step.stopped) r.finish_reason = "stop";
    return step.stopped || int64_t(r.tokens.size()) == opts.max_tokens;
  };
  const bool speculate = opts.draft_tokens > 0 && lm.can_draft();
  if (speculate && opts.logprobs) throw error("generate: logprobs are recorded without speculative decoding only");
  // log softmax(l)[id] in double; masked (-inf) logits add nothing.
  auto record = [&](const std::vector<float>& l, token_id id) {
    if (!opts.logprobs) return;
    double mx = -std::numeric_limits<double>::infinity(), sum = 0;
    for (float x : l) mx = std::max(mx, double(x));
    for (float x : l) sum += std::exp(double(x) - mx);
    r.logprobs.push_back(float(double(l[size_t(id)]) - mx - std::log(sum)));
  };
  if (speculate) lm.prepare_drafts();

  auto t0 = clock::now();
  std::vector<float> logits = lm.append(prompt);
  r.prompt_seconds = seconds_since(t0);
  const auto t1 = clock::now();
  mask(logits);
  token_id next = s.sample(logits);  // sampled and emitted, not yet appended (the sequence's invariant)
  record(logits, next);
  bool done = push(next);
  while (!done) {
    // Each verify step emits up to k + 1 tokens; the budget left bounds k.
    const int64_t k = speculate ? std::min(opts.draft_tokens, opts.max_tokens - int64_t(r.tokens.size()) - 1) : 0;
    if (k == 0) {
      const token_id one[] = {next};
      logits = lm.append(one);
      mask(logits);
      next = s.sample(logits);
      record(logits, next);
      done = push(next);
      continue;
    }
    std::vector<token_id> seq = {next};
    std::vector<std::vector<double>> q;
    lm.draft(next, k, [&](std::vector<float>& l) {
      mask(l);
      q.push_back(s.draft_distribution(l));
      const token_id d = draw_from(q.back(), s.draw());
      seq.push_back(d);
      return d;
    });
    if (int64_t(seq.size()) != k + 1) throw error("generate: the model drafted a wrong number of tokens");
    const std::vector<float> rows = lm.append_verify(seq);
    if (int64_t(rows.size()) != (k + 1) * V) throw error("generate: the model returned a wrong logits size");
    ++r.verify_steps;
    r.drafted += k;
    // Row j holds the logits after seq[j]: the target for draft seq[j + 1], then (j = k) the bonus token.
    // The sequence then keeps seq[0..j]: the tokens whose successor was emitted, never the last emitted
    // token (as the plain loop, which appends a token only once it samples after it).
    int64_t kept = k + 1;
    for (int64_t j = 0; j <= k; ++j) {
      std::vector<float> row(rows.begin() + j * V, rows.begin() + (j + 1) * V);
      mask(row);
      const std::vector<double> p = s.distribution(row);
      if (j == k) {  // every draft kept: one more token from the last row
        next = draw_from(p, s.draw());
        done = push(next);
        break;
      }
      const double ua = s.draw(), ur = s.draw();
      const draft_verdict v = accept_draft(p, q[size_t(j)], seq[size_t(j + 1)], ua, ur);
      next = v.token;
      r.accepted += v.accepted;
      done = push(next);
      if (!v.accepted || done) {
        kept = j + 1;
        break;
      }
    }
    lm.keep(kept);
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

void causal_lm::draft(token_id, int64_t, const std::function<token_id(std::vector<float>&)>&) {
  throw error("generate: this model cannot draft tokens");
}

std::vector<float> causal_lm::append_verify(std::span<const token_id>) {
  throw error("generate: this model cannot verify drafts");
}

void causal_lm::keep(int64_t) {
  throw error("generate: this model cannot verify drafts");
}

}  // namespace moxi::runtime
