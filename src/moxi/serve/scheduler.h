// scheduler: decides, every step, how many tokens each request runs, `{request_id -> n_tokens}` under a
// token budget, with prefill chunks and decode tokens mixed in one batch and no prefill/decode phase in
// the API (vLLM v1's unified scheduler: a request simply runs from num_computed_tokens towards
// num_tokens). Chunked prefill, a cap on running requests, a FCFS waiting queue, prefix-cache lookup at
// admission, preemption by recompute when blocks run out, and cancellation at the next step.
//
// One step: schedule() -> the model runner executes it through the hybrid memory -> update() with the
// sampled tokens. Single-threaded: the engine loop owns the scheduler and its memory.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "moxi/memory/hybrid-memory.h"

namespace moxi::serve {

using request_id = uint64_t;

struct scheduler_config {
  int64_t max_num_batched_tokens = 2048;  // token budget per step (vLLM --max-num-batched-tokens)
  int32_t max_num_running = 64;           // running requests at most (vLLM --max-num-seqs)
  int64_t max_prefill_chunk = 0;          // > 0: cap per request per step (vLLM long_prefill_token_threshold)
  bool chunked_prefill = true;            // false: a prompt waits until it fits the budget whole
  int64_t max_model_len = 0;              // prompt + max_tokens limit; 0 = what the block pool can hold
  // Speculative decoding (docs/speculative.md, "Serving"): positions beyond its token a decode step may
  // fill with drafts that the runner verifies in the same forward (vLLM num_speculative_tokens). They are
  // reserved in memory and counted against the token budget; 0: off.
  int64_t num_speculative_tokens = 0;
};

struct request_params {
  std::vector<token_id> prompt;
  int64_t max_tokens = 16;
  std::vector<token_id> stop_tokens;  // e.g. eos; the stop token is part of the output
  // The prompt's identity for the prefix cache, the same length as the prompt (image placeholders keyed by
  // their image's content, serve/api-openai.h); empty: the prompt itself.
  std::vector<token_id> cache_key;
};

enum class finish_reason : uint8_t { NONE, STOP, LENGTH, ABORT };

struct scheduled_request {
  request_id id = 0;
  memory::seq_id seq = -1;
  int64_t start = 0;             // position of the first token fed = tokens computed before the step
  std::vector<token_id> tokens;  // the tokens at positions [start, start + tokens.size())
  bool sample = false;           // the step reaches the last known token: the runner returns the next one
  // Parallel sampling (n > 1): requests forked from this one once the step ends (its last prompt chunk).
  // The runner samples one token for each of them too, from this step's logits with their own samplers.
  std::vector<request_id> forks;
  // Speculative decoding: positions after `tokens` reserved for drafts (0 unless the step decodes one
  // token of a request that already has output; never more than its max_tokens leaves room for).
  int64_t lookahead = 0;
  // The token after `tokens` when the request already holds it (a prompt chunk that is not the last);
  // -1 when the step samples it. The MTP head reads it.
  token_id next = -1;
  int64_t n_tokens() const { return int64_t(tokens.size()); }
};

// What the runner emits per request that samples: one token, or with speculative decoding the kept drafts
// followed by one sampled token (1 + lookahead at most).
using sampled_tokens = std::map<request_id, std::vector<token_id>>;

struct scheduler_output {
  std::vector<scheduled_request> scheduled;  // this step's batch
  int64_t total_tokens = 0;                  // sum of n_tokens + lookahead, <= max_num_batched_tokens
  std::vector<request_id> preempted;         // freed this step and back at the head of the waiting queue
  std::vector<request_id> aborted;           // cancelled; their blocks and slots were freed this step
};

// What one step did for one request (update() returns these; the HTTP layer streams them).
struct request_output {
  request_id id = 0;
  std::vector<token_id> new_tokens;
  finish_reason finished = finish_reason::NONE;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;  // prompt tokens reused from the prefix cache at first admission
};

struct scheduler_stats {
  int64_t steps = 0;
  int64_t scheduled_tokens = 0;     // tokens the model computed, all steps together
  int64_t prefill_tokens = 0;       // of them, prompt positions (a preempted request's count again)
  int64_t prefix_query_tokens = 0;  // vLLM prefix_cache_queries: tokens looked up at admission
  int64_t prefix_hit_tokens = 0;    // vLLM prefix_cache_hits
  int64_t preemptions = 0;
  int64_t aborted = 0;
};

class scheduler {
 public:
  scheduler(memory::hybrid_memory& memory, const scheduler_config& config);

  // Throws moxi::error naming the request for an empty prompt, max_tokens < 1, a duplicate id or a
  // prompt + max_tokens over max_model_len (such a request could never finish, even alone).
  // fork_ids: parallel sampling (n > 1). Each is another request with the same params whose prompt is not
  // computed again: when `id` finishes its prefill, the step samples a first token for every fork from the
  // same logits, and each fork continues on a hybrid_memory::fork of the sequence (full blocks shared,
  // partial block and KDA state copied). Without a free slot or block (or beyond max_num_running) a fork
  // waits instead, keeping its first token, and recomputes its prompt through the prefix cache, as a
  // preempted request does; if `id` is cancelled before its prefill ends, its forks run on as requests of
  // their own.
  void add_request(request_id id, request_params params, const std::vector<request_id>& fork_ids = {});
  // Marks a request cancelled (a client disconnect); the next schedule() frees its memory and update()
  // reports it finished with ABORT. Unknown or finished ids are ignored.
  void cancel(request_id id);

  scheduler_output schedule();
  // Commits the step to memory, appends `sampled` (tokens per scheduled request with sample set: the kept
  // drafts, whose positions the step computed, then one sampled token), finishes requests on a stop token,
  // max_tokens or when `ended` holds them (STOP: a complete constrained output, after its last token), and
  // reports every request that got tokens, finished or was aborted. Tokens after one that finishes the
  // request are dropped.
  std::vector<request_output> update(const scheduler_output& out, const sampled_tokens& sampled,
                                     const std::set<request_id>& ended = {});

  bool has_unfinished() const { return !requests_.empty(); }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  // Prompt tokens of the unfinished requests that no step has computed yet (a long prompt's prefill
  // progress; prefix-cache hits count as computed once admitted).
  int64_t prefill_tokens_pending() const;
  const scheduler_stats& stats() const { return stats_; }
  const scheduler_config& config() const { return config_; }
  memory::hybrid_memory& memory() { return memory_; }

 private:
  struct request {
    request_id id = 0;
    request_params params;
    std::vector<token_id> tokens;  // prompt, then outputs
    std::vector<token_id> keys;    // the same, as the prefix cache hashes them (params.cache_key)
    int64_t num_prompt = 0;
    int64_t num_computed = 0;
    std::optional<memory::seq_id> seq;
    int64_t num_cached_tokens = -1;  // set at the first admission
    bool cancelled = false;
    std::vector<request_id> forks;      // not forked yet (cleared when the prefill ends)
    std::optional<request_id> fork_of;  // set while this request waits for its parent's prefill
  };
  void fork_children(request& parent, const scheduled_request& s, const sampled_tokens& sampled,
                     const std::set<request_id>& ended, std::vector<request_output>& events);
  // Appends tokens up to the first that is a stop token or reaches max_tokens (or the last, when `end`);
  // o.finished then says why. Does not free anything (finish() does).
  request_output append(request& r, std::span<const token_id> tokens, bool end);
  // Frees a finished request's memory and forgets it.
  void finish(request& r);
  // Draft positions a decode step of n tokens may reserve (scheduled_request::lookahead).
  int64_t lookahead(const request& r, int64_t n, int64_t budget) const;
  int64_t chunk(const request& r, int64_t start, int64_t budget) const;
  void preempt(request& r, scheduler_output& out);
  void drop_cancelled(scheduler_output& out);
  request_output report(const request& r) const;

  memory::hybrid_memory& memory_;
  scheduler_config config_;
  std::unordered_map<request_id, request> requests_;
  std::vector<request_id> running_;  // admission order: preemption takes from the back (vLLM FCFS)
  std::deque<request_id> waiting_;
  std::unordered_set<request_id> cancelled_;
  scheduler_stats stats_;
};

}  // namespace moxi::serve
