// Plausibility checks on a config.json and the files next to it, run before anything is sized from them:
// every size field has a limit far above any real model (the seed is the largest moxi plans for), so a
// hostile or mistyped value fails in milliseconds with the field named instead of allocating gigabytes or
// looping for minutes. The limits and their reasons are in docs/security.md ("Loading") and
// docs/configs.md ("Validation").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"

namespace moxi::formats {

// The longest context any config may declare (max_position_embeddings, model_max_length, and
// rope_scaling.original_max_position_embeddings): 16 Mi tokens, 16x the seed's 1 Mi.
inline constexpr int64_t kMaxContextTokens = int64_t(1) << 24;

// One plausibility limit: the field (a dotted path; "a|b" names spellings of one field in different model
// types), the largest value accepted, and why that is plausible.
struct config_limit {
  const char* field;
  int64_t max;
  const char* why;
};
// Every limit, in the order they are checked.
const std::vector<config_limit>& config_limits();
// Routed experts x (decoder + MTP layers): the number of expert instances the manifest holds, each 2-6
// tensors. The seed has 896 x 94 = 84,224 (502,524 tensors in all).
inline constexpr int64_t kMaxRoutedExpertInstances = int64_t(1) << 19;

// Checks the raw document against config_limits() and the cross-field bounds (expert instances; special
// token ids in [0, vocab_size)), before any field is parsed or anything is sized from it. Throws
// moxi::error "<source>: field '<name>': ..." naming the field and the limit. Fields of the wrong type are
// left to the parser (which names them too). parse_model_config calls this first, so every tool that
// reads a config (inspect, plan, init, quantize, generate, chat, serve, eval, train) runs the same checks.
void validate_model_config(const nlohmann::json& doc, const std::string& source);

// Checks the files of a model directory that hold token ids against the model's vocabulary, so that no
// id the tokenizer, the generation config or the tokenizer config can produce is outside [0, vocab_size):
//   tokenizer.json: every vocabulary and added-token id;
//   generation_config.json: bos/eos/pad/decoder_start_token_id (an id or a list of ids);
//   tokenizer_config.json: the ids of added_tokens_decoder.
// Absent files are skipped. Throws moxi::error naming the file, the field and the id.
void validate_model_dir(const model_config& config, const std::string& dir);

}  // namespace moxi::formats
