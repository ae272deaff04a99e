// executor: the real model behind the engine step (model_runner). Each scheduled request runs through
// model::model::forward over its hybrid_memory sequence via a paged sequence_cache adapter, requests of
// one step run in parallel (the forward is per sequence), and each request samples with its own sampler
// (temperature, top_p, seed, penalties), optionally reporting logprobs of the sampled and top tokens.
// Lives in serve/ because model_runner does (layering: serve -> runtime -> model).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "moxi/base/thread-pool.h"
#include "moxi/memory/hybrid-memory.h"
#include "moxi/model/model.h"
#include "moxi/runtime/sampler.h"
#include "moxi/serve/model-runner.h"

namespace moxi::serve {

// The logprob of one sampled token (log-softmax of the raw logits, as vLLM reports by default) and the
// top alternatives, most likely first.
struct token_logprobs {
  token_id token = 0;
  float logprob = 0;
  std::vector<std::pair<token_id, float>> top;
};

class executor final : public model_runner {
 public:
  // parallel: run the requests of a step on the process-wide thread pool (the kernels' pool, whose nested
  // calls then run inline); a step with one request always runs alone so that its kernels use the pool.
  executor(const model::model& m, memory::hybrid_memory& memory, bool parallel = true);

  // A request's sampler; must be added before its first step and removed after it finishes. top_logprobs
  // < 0: no logprobs; >= 0: the sampled token's logprob plus that many alternatives.
  void add(request_id id, const sampling_params& params, std::span<const token_id> prompt, int top_logprobs);
  void remove(request_id id);

  std::map<request_id, token_id> execute(const scheduler_output& step) override;
  // Logprobs of the tokens sampled by the last execute(), for requests that asked for them.
  const std::map<request_id, token_logprobs>& last_logprobs() const { return logprobs_; }

 private:
  struct request_state {
    sampler smp;
    int top_logprobs = -1;
  };
  const model::model& model_;
  memory::hybrid_memory& memory_;
  bool parallel_;
  std::map<request_id, std::unique_ptr<request_state>> requests_;
  std::map<request_id, token_logprobs> logprobs_;
};

}  // namespace moxi::serve
