// Token sampling from logits (greedy, temperature, top-k, top-p, min-p, repetition/presence/frequency
// penalties, seeded per request) and stop handling on the detokenized stream. Semantics follow vLLM's
// sampler (v1) and the OpenAI API; docs/tokenizers.md spells out the order and the formulas.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "moxi/formats/tokenizer.h"
#include "moxi/runtime/json-constraint.h"

namespace moxi::runtime {

struct sampling_params {
  float temperature = 1.0f;         // 0 (or below 1e-5, as vLLM) means greedy
  int top_k = 0;                    // <= 0 disables (vLLM accepts 0 and -1)
  float top_p = 1.0f;               // (0, 1]; 1 disables
  float min_p = 0.0f;               // [0, 1]; 0 disables
  float repetition_penalty = 1.0f;  // > 0; 1 disables. Over prompt and output tokens (vLLM / HF CTRL form)
  float presence_penalty = 0.0f;    // [-2, 2], OpenAI; over output tokens
  float frequency_penalty = 0.0f;   // [-2, 2], OpenAI; over output tokens
  std::optional<uint64_t> seed;     // set: a reproducible request; unset: seeded from std::random_device
};

// Throws moxi::error naming the first parameter out of range.
void validate(const sampling_params& params);

// Penalties in vLLM's order, in place on logits (float [vocab]):
//   repetition: for tokens seen in prompt or output, l = l > 0 ? l / r : l * r
//   frequency:  l -= frequency_penalty * count_in_output
//   presence:   l -= presence_penalty * (count_in_output > 0)
void apply_penalties(std::span<float> logits, const sampling_params& params, std::span<const token_id> prompt,
                     const std::unordered_map<token_id, int>& output_counts);

// The distribution a non-greedy draw uses, from (penalized) logits: softmax(l / T), then min-p (drop p <
// min_p * p_max), then top-k (drop p below the k-th largest; ties at the k-th value stay), then top-p (keep
// the smallest most-likely set whose mass reaches top_p, ties broken by lower id), renormalized after each
// step. fp64 [vocab]; NaN logits count as -inf. Throws moxi::error when no token is left.
std::vector<double> sampling_distribution(std::span<const float> logits, const sampling_params& params);

// Index of the largest logit, lowest id on ties, NaN never chosen.
token_id argmax(std::span<const float> logits);

// The token at uniform draw u in [0, 1) of an fp64 distribution, by inverse CDF in id order (the last token
// with mass when u lands in the rounding gap below 1).
token_id draw_from(std::span<const double> prob, double u);

// One request's sampler: owns the RNG, the token history that penalties need and, for constrained
// decoding (response_format), the JSON constraint that masks the logits after the penalties.
class sampler {
 public:
  sampler(sampling_params params, std::span<const token_id> prompt,
          std::optional<json_constraint> constraint = std::nullopt);

  // Picks the next token from logits (float [vocab]); does not record it (see accept) so that speculative
  // decoding can sample drafts it may reject.
  token_id sample(std::span<const float> logits);
  // Records a token as generated output, for the penalties, and advances the constraint.
  void accept(token_id id);
  // A constrained output is complete and nothing may follow it: the generation ends.
  bool constraint_done() const { return constraint_ && constraint_->done(); }

  // Speculative decoding (runtime/speculative.h). The distribution sample() draws from, fp64 [vocab]:
  // penalties and constraint applied, then sampling_distribution, or one-hot on the argmax when greedy.
  std::vector<double> distribution(std::span<const float> logits);
  // The distribution a draft is drawn from: the same transforms without penalties or constraint.
  std::vector<double> draft_distribution(std::span<const float> logits) const;
  // One uniform draw in [0, 1) from the request's RNG.
  double draw() { return uniform(rng_); }

  const sampling_params& params() const { return params_; }

  // Uniform double in [0, 1) from the top 53 bits of one mt19937_64 draw (portable, unlike
  // std::generate_canonical, so a seed gives the same tokens with any standard library).
  static double uniform(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1.0p-53; }

 private:
  sampling_params params_;
  std::vector<token_id> prompt_;
  std::unordered_map<token_id, int> output_counts_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::optional<json_constraint> constraint_;
};

// Stop handling on the detokenized stream. Feed each token's id and its text chunk (from stream_decoder);
// text that might be the start of a stop string is held back until it is known not to be, a stop string
// spanning several tokens is found, and the text before it is emitted while the stop string is not.
class stop_checker {
 public:
  stop_checker(std::vector<std::string> stop_strings, std::vector<token_id> stop_token_ids);

  struct step {
    std::string text;      // safe to emit now
    bool stopped = false;  // generation ends here
  };
  // A stop token ends generation without its text. Among stop strings, the earliest occurrence wins.
  step push(token_id id, std::string_view text);
  // End of generation without a stop: releases held-back text.
  std::string flush();

 private:
  std::vector<std::string> stop_strings_;
  std::vector<token_id> stop_ids_;
  size_t longest_ = 0;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace moxi::runtime
