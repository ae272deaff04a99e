// Offline batched generation over the serving engine (see offline.h).
#include "moxi/serve/offline.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "moxi/base/error.h"
#include "moxi/memory/cache-spec.h"
#include "moxi/memory/hybrid-memory.h"
#include "moxi/serve/engine-core.h"
#include "moxi/serve/executor.h"

namespace moxi::serve {

std::vector<std::vector<offline_sample>> generate_offline(
    const model::model& m, const std::vector<offline_request>& requests, const offline_options& options,
    offline_stats* stats, const std::function<void(int64_t, int64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t vocab = m.config().vocab_size;
  if (options.max_running < 1 || options.max_batch_tokens < 1 || options.block_size < 1)
    throw error("offline generation: max_running, max_batch_tokens and block_size must be >= 1");
  int64_t longest = 1, total = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    const std::string where = "offline generation: request " + std::to_string(i);
    if (r.prompt.empty()) throw error(where + ": empty prompt");
    if (r.n < 1) throw error(where + ": n must be >= 1");
    if (r.max_tokens < 1) throw error(where + ": max_tokens must be >= 1");
    for (token_id t : r.prompt)
      if (t < 0 || t >= vocab) throw error(where + ": token id " + std::to_string(t) + " out of range");
    runtime::validate(r.sampling);
    longest = std::max(longest, int64_t(r.prompt.size()) + r.max_tokens);
    total += r.n;
  }
  std::vector<std::vector<offline_sample>> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) out[i].resize(size_t(requests[i].n));
  if (requests.empty()) return out;

  // Room for max_running sequences of the longest length at once (and a spare block each for a fork's copy
  // of its parent's partial block), so that nothing is preempted for lack of blocks.
  memory::memory_options mo;
  mo.block_size = options.block_size;
  const int64_t blocks_per_seq = (longest + options.block_size - 1) / options.block_size + 1;
  mo.num_blocks = int32_t(std::min<int64_t>(int64_t(options.max_running) * blocks_per_seq + 1, INT32_MAX));
  mo.num_state_slots = options.max_running + 1;
  mo.num_snapshot_slots = 0;
  mo.prefix_caching = false;  // samples of a prompt share its prefill by forking; prompts rarely repeat
  memory::hybrid_memory memory(memory::cache_spec::from_config(m.config()), mo);
  scheduler_config sc;
  sc.max_num_batched_tokens = std::max<int64_t>(options.max_batch_tokens, 1);
  sc.max_num_running = options.max_running;
  sc.max_model_len = longest;
  scheduler sched(memory, sc);
  executor exec(m, memory);
  engine_core engine(sched, exec);

  // Request ids: sample k of request i is id base[i] + k (k = 0 is the one that prefills).
  struct where_t {
    size_t request, sample;
  };
  std::map<request_id, where_t> where;
  request_id next = 1;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    request_params p;
    p.prompt = r.prompt;
    p.max_tokens = r.max_tokens;
    p.stop_tokens = r.stop_tokens;
    std::vector<request_id> forks;
    const request_id first = next;
    for (int k = 0; k < r.n; ++k) {
      const request_id id = next++;
      where[id] = {i, size_t(k)};
      auto sp = r.sampling;
      if (sp.seed) sp.seed = *sp.seed + uint64_t(k);
      exec.add(id, sp, r.prompt, r.logprobs ? 0 : -1);
      if (k > 0) forks.push_back(id);
    }
    sched.add_request(first, std::move(p), forks);
  }

  int64_t done = 0;
  offline_stats st;
  std::map<request_id, std::deque<token_logprobs>> pending;
  for (const auto& r : requests) st.prompt_tokens += int64_t(r.prompt.size());
  while (sched.has_unfinished()) {
    const auto res = engine.step();
    if (!res.error.empty()) throw error("offline generation: " + res.error);
    if (res.idle()) throw error("offline generation: the scheduler made no progress (a request cannot fit)");
    ++st.steps;
    // A fork's first token is sampled in its parent's step but may be reported later (when the fork waited
    // for a slot): log-probs queue per request until its tokens are reported.
    for (const auto& [id, lp] : exec.last_logprobs()) pending[id].push_back(lp);
    for (const auto& o : res.outputs) {
      const auto& w = where.at(o.id);
      auto& s = out[w.request][w.sample];
      for (token_id t : o.new_tokens) {
        s.tokens.push_back(t);
        ++st.generated_tokens;
        if (requests[w.request].logprobs) {
          auto& q = pending[o.id];
          MOXI_ASSERT(!q.empty() && q.front().token == t, "offline generation: a token without its logprob");
          s.logprobs.push_back(q.front().logprob);
          q.pop_front();
        }
      }
      if (o.finished != finish_reason::NONE) {
        s.finish = o.finished;
        exec.remove(o.id);
        pending.erase(o.id);
        ++done;
      }
    }
    if (progress) progress(done, total);
  }
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return out;
}

}  // namespace moxi::serve
