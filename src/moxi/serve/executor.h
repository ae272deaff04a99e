// executor: the real model behind the engine step (model_runner). A step's requests run through one
// model::model::forward_batch (every linear layer one GEMM over all their rows; attention and KDA per
// sequence) over their hybrid_memory sequences via a paged sequence_cache adapter, and each request samples
// with its own sampler (temperature, top_p, seed, penalties), optionally reporting logprobs of the sampled
// and top tokens.
// Lives in serve/ because model_runner does (layering: serve -> runtime -> model).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "moxi/base/thread-pool.h"
#include "moxi/memory/hybrid-memory.h"
#include "moxi/model/model.h"
#include "moxi/runtime/sampler.h"
#include "moxi/serve/model-runner.h"
#include "moxi/serve/spec-stats.h"

namespace moxi::serve {

// The logprob of one sampled token (log-softmax of the raw logits, as vLLM reports by default) and the
// top alternatives, most likely first.
struct token_logprobs {
  token_id token = 0;
  float logprob = 0;
  std::vector<std::pair<token_id, float>> top;
};

// How a step with several requests runs the model.
enum class executor_mode {
  batched,     // one model::forward_batch over all of them (the default)
  parallel,    // one model::forward per request, requests spread over the thread pool (nested kernel
               // calls then run inline); kept for comparison (moxi serve --executor parallel)
  sequential,  // one model::forward per request, one after another, each with the whole pool
};

// The hybrid memory's layout for a model: its (rank-local) heads, and under pipeline parallelism only the
// stage's own layers held.
memory::cache_spec cache_spec_of(const model::model& m);

class executor final : public model_runner {
 public:
  executor(const model::model& m, memory::hybrid_memory& memory, executor_mode mode = executor_mode::batched);
  ~executor() override;
  // One sequence's gather buffers for the MLA rows, kept across steps (defined in executor.cpp).
  struct gather_set;

  // Speculative decoding with the model's MTP head (docs/speculative.md, "Serving"): every step the MTP
  // layer reads the positions it computed and drafts k tokens for each request that samples; the next
  // decode step of that request verifies them in the same batched forward, at the lookahead positions the
  // scheduler reserved (scheduler_config::num_speculative_tokens, set it to k). Greedy tokens equal those
  // without drafts; sampled ones have the same distribution. Requests that ask for logprobs decode without
  // drafts. Throws for a model without an MTP layer or one split across processes. Set before the first
  // step; 0 turns it off.
  void set_draft_tokens(int64_t k);
  int64_t draft_tokens() const { return draft_tokens_; }
  const draft_stats& drafts() const { return draft_stats_; }

  // A request's sampler; must be added before its first step and removed after it finishes. top_logprobs
  // < 0: no logprobs; >= 0: the sampled token's logprob plus that many alternatives. `constraint`: the
  // request's response_format (each choice its own state); a token that completes it ends the request.
  // `media`: image rows for the prompt's placeholder tokens in order (model::forward_options::media); each
  // step passes the rows of the placeholders among the prompt positions it runs.
  void add(request_id id, const runtime::sampling_params& params, std::span<const token_id> prompt,
           int top_logprobs, std::optional<runtime::json_constraint> constraint = std::nullopt,
           std::shared_ptr<const std::vector<float>> media = nullptr);
  void remove(request_id id);

  sampled_tokens execute(const scheduler_output& step) override;
  // The step's forward alone: each scheduled request's logits at its last fed position (computed for
  // every request, sampled or not), the caches left holding the step's tokens. Ranks of a serving group
  // other than the leader run only this (serve/group.h).
  std::vector<std::vector<float>> forward(const scheduler_output& step);
  // Logprobs of the tokens sampled by the last execute(), for requests that asked for them.
  const std::map<request_id, token_logprobs>& last_logprobs() const { return logprobs_; }
  // Requests whose last sampled token completed their constrained output.
  const std::set<request_id>& ended() const override { return ended_; }

 private:
  struct request_state {
    runtime::sampler smp;
    int top_logprobs = -1;
    std::shared_ptr<const std::vector<float>> media;  // null: a text prompt
    std::vector<int64_t> placeholder_at;              // prompt positions of the placeholders (with media)
    // Speculative decoding: the drafts for the step whose token sits at position drafts_at, and the
    // distributions they were drawn from.
    int64_t drafts_at = -1;
    std::vector<token_id> drafts;
    std::vector<std::vector<double>> q;
  };
  sampled_tokens execute_speculative(const scheduler_output& step);
  // The gather buffers each scheduled request's paged cache borrows, in step order: the set its sequence
  // used last step (same incarnation), whose rows are still valid and only need this step's new ones, else
  // a set left over from a sequence no longer scheduled (or a new one). Sets of sequences not in the step
  // are released, so the pool holds at most the step's sequences' histories.
  std::vector<gather_set*> prepare_gathers(const std::vector<scheduled_request>& reqs);
  std::vector<std::unique_ptr<gather_set>> gather_pool_;
  // The media rows of a scheduled chunk: those of the prompt placeholders at positions [start, start + n).
  std::span<const float> media_of(const scheduled_request& r) const;
  const model::model& model_;
  memory::hybrid_memory& memory_;
  executor_mode mode_;
  int64_t draft_tokens_ = 0;
  draft_stats draft_stats_;
  std::map<request_id, std::unique_ptr<request_state>> requests_;
  std::map<request_id, token_logprobs> logprobs_;
  std::set<request_id> ended_;
};

}  // namespace moxi::serve
