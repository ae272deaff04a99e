// Offline batched generation over the serving engine (vLLM's LLM.generate): a list of prompts, each with
// n samples, run to completion through the same scheduler, paged hybrid memory and batched executor that
// `moxi serve` runs (continuous batching, chunked prefill, n > 1 forked from one prefill), without HTTP.
// RL rollouts use it, so the policy samples exactly as it is served, and keep each sampled token's
// log-probability for the trainer.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "moxi/model/model.h"
#include "moxi/runtime/sampler.h"
#include "moxi/serve/scheduler.h"

namespace moxi::serve {

struct offline_request {
  std::vector<token_id> prompt;
  int n = 1;                          // samples of this prompt (forked after one prefill)
  runtime::sampling_params sampling;  // sample k gets seed + k when a seed is set
  int64_t max_tokens = 256;
  std::vector<token_id> stop_tokens;  // a stop token ends the sample and is part of it
  bool logprobs = true;               // keep the log-probability of every sampled token
};

struct offline_sample {
  std::vector<token_id> tokens;  // the generated tokens (a final stop token included)
  // log-softmax of the raw logits at each sampled token (the distribution sampled from when temperature
  // is 1 and no truncation is set), one per token; empty without logprobs
  std::vector<float> logprobs;
  finish_reason finish = finish_reason::NONE;  // STOP (stop token) or LENGTH (max_tokens)
};

struct offline_options {
  int64_t max_batch_tokens = 2048;  // token budget per engine step
  int32_t max_running = 64;         // sequences decoded at once
  int32_t block_size = 16;
};

struct offline_stats {
  int64_t steps = 0;
  int64_t prompt_tokens = 0;     // tokens prefilled (a forked prompt counts once)
  int64_t generated_tokens = 0;  // tokens sampled
  double seconds = 0;
};

// Runs every request to completion; out[i][k] is sample k of request i. `progress` (optional) is called
// after each engine step with the samples finished so far and in all. Throws moxi::error for a bad request
// (empty prompt, n < 1, max_tokens < 1, a token id out of range) before anything runs.
std::vector<std::vector<offline_sample>> generate_offline(
    const model::model& m, const std::vector<offline_request>& requests, const offline_options& options = {},
    offline_stats* stats = nullptr, const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace moxi::serve
