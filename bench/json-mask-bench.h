// `moxi bench json-mask --model DIR`: the cost of response_format's constrained decoding per step. The
// token mask (runtime/json-constraint.h) is computed at every byte position of a JSON document (in strings
// most tokens take the plain-text fast path; elsewhere each token's bytes are walked through the automaton),
// for the model's own vocabulary and for a synthetic 32k-token byte-level vocabulary, and set against the
// model's single-token forward (decode step) measured in the same run.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace moxi::bench {

struct json_mask_row {
  std::string vocab;  // "model" or "synthetic"
  int64_t tokens = 0;
  double mean_bytes_per_token = 0;
  int64_t states = 0;  // prefixes of the document the mask was computed at
  double mean_us = 0, string_us = 0, other_us = 0, max_us = 0;
  double vs_forward = 0;  // mean_us / forward step
};

struct json_mask_result {
  std::string model;
  double forward_ms = 0;  // one decode step of the model (batch 1, short context)
  std::vector<json_mask_row> rows;
};

json_mask_result run_json_mask_bench(const std::string& model_dir, int64_t synthetic_vocab, int runs);

void add_json_mask_bench(CLI::App& bench);

}  // namespace moxi::bench
