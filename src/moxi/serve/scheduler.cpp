// scheduler: the step loop of vLLM v1's Scheduler.schedule() (running requests first, then waiting ones
// while nothing was preempted) and update_from_output(), over moxi's hybrid memory.
#include "moxi/serve/scheduler.h"

#include <algorithm>
#include <string>

#include "moxi/base/error.h"

namespace moxi::serve {

scheduler::scheduler(memory::hybrid_memory& memory, const scheduler_config& config)
    : memory_(memory), config_(config) {
  const int64_t capacity = int64_t(memory.options().num_blocks) * memory.block_size();
  if (config_.max_model_len <= 0 || config_.max_model_len > capacity) config_.max_model_len = capacity;
  if (config_.max_num_batched_tokens < 1 || config_.max_num_running < 1)
    throw error("scheduler: max_num_batched_tokens and max_num_running must be >= 1");
}

void scheduler::add_request(request_id id, request_params params, const std::vector<request_id>& fork_ids) {
  const std::string name = "request " + std::to_string(id);
  if (params.prompt.empty()) throw error(name + ": the prompt is empty; at least one token is needed");
  if (params.max_tokens < 1)
    throw error(name + ": max_tokens must be >= 1, got " + std::to_string(params.max_tokens));
  const int64_t need = int64_t(params.prompt.size()) + params.max_tokens;
  if (need > config_.max_model_len)
    throw error(name + ": prompt (" + std::to_string(params.prompt.size()) + " tokens) + max_tokens (" +
                std::to_string(params.max_tokens) + ") exceeds the maximum of " +
                std::to_string(config_.max_model_len) + " tokens");
  std::unordered_set<request_id> ids{id};
  for (request_id f : fork_ids)
    if (!ids.insert(f).second) throw error(name + ": fork id " + std::to_string(f) + " is given twice");
  for (request_id x : ids)
    if (requests_.count(x))
      throw error(name + ": a request with id " + std::to_string(x) + " is already running");
  request r;
  r.id = id;
  r.tokens = params.prompt;
  if (!params.cache_key.empty() && params.cache_key.size() != params.prompt.size())
    throw error(name + ": the prompt's cache key has " + std::to_string(params.cache_key.size()) +
                " tokens, the prompt " + std::to_string(params.prompt.size()));
  r.keys = params.cache_key.empty() ? params.prompt : params.cache_key;
  r.num_prompt = int64_t(params.prompt.size());
  r.params = std::move(params);
  for (request_id f : fork_ids) {
    request c = r;
    c.id = f;
    c.fork_of = id;
    requests_.emplace(f, std::move(c));
  }
  r.forks = fork_ids;
  requests_.emplace(id, std::move(r));
  waiting_.push_back(id);
}

void scheduler::cancel(request_id id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second.cancelled) return;
  it->second.cancelled = true;
  cancelled_.insert(id);
}

int64_t scheduler::chunk(const request& r, int64_t start, int64_t budget) const {
  int64_t n = std::min(int64_t(r.tokens.size()) - start, budget);
  if (config_.max_prefill_chunk > 0) n = std::min(n, config_.max_prefill_chunk);
  // KDA state exists only where a step ends, so a chunk that crosses a block boundary stops at the last
  // one it crosses; the snapshot taken there is what a later prefix hit restores (vLLM "align" mode).
  // Single decode tokens never cross, so decode is unaffected.
  if (memory_.wants_block_aligned_steps()) {
    const int64_t B = memory_.block_size();
    const int64_t aligned = (start + n) / B * B;
    if (aligned > start) n = aligned - start;
  }
  return n;
}

void scheduler::preempt(request& r, scheduler_output& out) {
  // Recompute, not swap: the request keeps its tokens (prompt + outputs so far) and recomputes them when
  // readmitted, usually from its own blocks still in the prefix cache (vLLM v1 preemption).
  memory_.free(*r.seq);
  r.seq.reset();
  r.num_computed = 0;
  waiting_.push_front(r.id);
  out.preempted.push_back(r.id);
  ++stats_.preemptions;
}

void scheduler::drop_cancelled(scheduler_output& out) {
  for (request_id id : cancelled_) {
    request& r = requests_.at(id);
    if (r.seq) {
      memory_.free(*r.seq);
      r.seq.reset();
      running_.erase(std::find(running_.begin(), running_.end(), id));
    } else if (r.fork_of) {
      auto& siblings = requests_.at(*r.fork_of).forks;
      siblings.erase(std::find(siblings.begin(), siblings.end(), id));
    } else {
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
    }
    // A parent cancelled before its prefill ended: its forks become requests of their own.
    for (request_id f : r.forks) {
      requests_.at(f).fork_of.reset();
      waiting_.push_back(f);
    }
    r.forks.clear();
    out.aborted.push_back(id);
    ++stats_.aborted;
  }
  cancelled_.clear();
  std::sort(out.aborted.begin(), out.aborted.end());
}

int64_t scheduler::prefill_tokens_pending() const {
  int64_t n = 0;
  for (const auto& [id, r] : requests_)
    if (!r.fork_of && !r.cancelled) n += std::max<int64_t>(0, r.num_prompt - r.num_computed);
  return n;
}

scheduler_output scheduler::schedule() {
  scheduler_output out;
  drop_cancelled(out);
  int64_t budget = config_.max_num_batched_tokens;
  auto add = [&](request& r, int64_t n, int64_t la) {
    scheduled_request s;
    s.id = r.id;
    s.seq = *r.seq;
    s.start = r.num_computed;
    s.tokens.assign(r.tokens.begin() + r.num_computed, r.tokens.begin() + r.num_computed + n);
    s.sample = r.num_computed + n == int64_t(r.tokens.size());
    if (s.sample) s.forks = r.forks;  // only the first sample (the prompt's end) has forks
    if (!s.sample) s.next = r.tokens[size_t(r.num_computed + n)];
    s.lookahead = la;
    out.scheduled.push_back(std::move(s));
    out.total_tokens += n + la;
    stats_.prefill_tokens +=
        std::max<int64_t>(0, std::min(r.num_computed + n, r.num_prompt) - r.num_computed);
    budget -= n + la;
  };

  // Running requests first, in admission order. When blocks run out, the most recently admitted request
  // is preempted (it is never one already scheduled this step: those are in front of the current one).
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    request& r = requests_.at(running_[i]);
    const int64_t n = chunk(r, r.num_computed, budget);
    int64_t la = lookahead(r, n, budget);
    bool self_preempted = false;
    while (!memory_.reserve(*r.seq, n + la)) {
      if (la > 0) {  // drafts are the first thing to go when blocks are short
        la = 0;
        continue;
      }
      request& victim = requests_.at(running_.back());
      running_.pop_back();
      preempt(victim, out);
      if (&victim == &r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    add(r, n, la);
  }

  // Then new requests, FCFS: the head waits rather than being overtaken, and nothing is admitted in a step
  // that had to preempt (memory is short; vLLM does the same).
  if (out.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && int32_t(running_.size()) < config_.max_num_running) {
      request& r = requests_.at(waiting_.front());
      const auto hit = memory_.find_prefix(r.keys);
      const int64_t remaining = int64_t(r.tokens.size()) - hit.num_tokens;
      if (!config_.chunked_prefill && remaining > budget) break;
      const int64_t n = chunk(r, hit.num_tokens, budget);
      if (!memory_.can_admit(hit, n)) break;
      r.seq = memory_.admit(hit, n);
      r.num_computed = hit.num_tokens;
      if (r.num_cached_tokens < 0) {
        r.num_cached_tokens = hit.num_tokens;
        stats_.prefix_query_tokens += int64_t(r.tokens.size());
        stats_.prefix_hit_tokens += hit.num_tokens;
      }
      waiting_.pop_front();
      running_.push_back(r.id);
      add(r, n, 0);
    }
  }
  ++stats_.steps;
  stats_.scheduled_tokens += out.total_tokens;
  return out;
}

request_output scheduler::report(const request& r) const {
  request_output o;
  o.id = r.id;
  o.num_prompt_tokens = r.num_prompt;
  o.num_cached_tokens = std::max<int64_t>(r.num_cached_tokens, 0);
  return o;
}

int64_t scheduler::lookahead(const request& r, int64_t n, int64_t budget) const {
  const int64_t outputs = int64_t(r.tokens.size()) - r.num_prompt;
  if (config_.num_speculative_tokens <= 0 || n != 1 || outputs < 1 ||
      r.num_computed + n != int64_t(r.tokens.size()))
    return 0;
  // A step emits at most 1 + lookahead tokens: never past max_tokens.
  return std::max<int64_t>(
      0, std::min({config_.num_speculative_tokens, r.params.max_tokens - outputs - 1, budget - n}));
}

request_output scheduler::append(request& r, std::span<const token_id> tokens, bool end) {
  MOXI_ASSERT(!tokens.empty(), "the runner returned no token for a request that samples");
  auto o = report(r);
  const auto& stops = r.params.stop_tokens;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const token_id t = tokens[i];
    r.tokens.push_back(t);
    r.keys.push_back(t);
    o.new_tokens.push_back(t);
    if ((end && i + 1 == tokens.size()) || std::find(stops.begin(), stops.end(), t) != stops.end())
      o.finished = finish_reason::STOP;
    else if (int64_t(r.tokens.size()) - r.num_prompt >= r.params.max_tokens)
      o.finished = finish_reason::LENGTH;
    if (o.finished != finish_reason::NONE) break;
  }
  return o;
}

void scheduler::finish(request& r) {
  if (r.seq) {
    memory_.free(*r.seq);
    running_.erase(std::find(running_.begin(), running_.end(), r.id));
  }
  cancelled_.erase(r.id);  // finished before its cancellation took effect
  requests_.erase(r.id);   // r is gone from here on
}

void scheduler::fork_children(request& parent, const scheduled_request& s, const sampled_tokens& sampled,
                              const std::set<request_id>& ended, std::vector<request_output>& events) {
  for (request_id id : s.forks) {
    request& c = requests_.at(id);  // a fork cancelled since schedule() is still here until the next one
    auto it = sampled.find(id);
    MOXI_ASSERT(it != sampled.end(), "the runner returned no token for a fork");
    c.fork_of.reset();
    c.num_cached_tokens = parent.num_cached_tokens;  // counted once, in the parent's admission
    MOXI_ASSERT(it->second.size() == 1, "a fork's first step samples one token");
    auto o = append(c, it->second, ended.count(id) > 0);
    const bool done = o.finished != finish_reason::NONE;
    events.push_back(std::move(o));
    if (done) {
      finish(c);
      continue;
    }
    std::optional<memory::seq_id> seq;
    if (int32_t(running_.size()) < config_.max_num_running) seq = memory_.fork(*parent.seq);
    if (seq) {
      c.seq = seq;
      c.num_computed = memory_.length(*seq);
      running_.push_back(id);
    } else {
      c.num_computed = 0;  // recomputes prompt + first token, mostly from the prefix cache
      waiting_.push_front(id);
    }
  }
  parent.forks.clear();
}

std::vector<request_output> scheduler::update(const scheduler_output& out, const sampled_tokens& sampled,
                                              const std::set<request_id>& ended) {
  std::vector<request_output> events;
  for (request_id id : out.aborted) {
    auto o = report(requests_.at(id));
    o.finished = finish_reason::ABORT;
    events.push_back(std::move(o));
    requests_.erase(id);
  }
  for (const auto& s : out.scheduled) {
    request& r = requests_.at(s.id);
    MOXI_ASSERT(r.seq && *r.seq == s.seq && r.num_computed == s.start, "update() of a step not scheduled");
    if (!s.sample) {
      memory_.commit(s.seq, r.keys, s.n_tokens());
      r.num_computed += s.n_tokens();
      continue;
    }
    auto it = sampled.find(s.id);
    MOXI_ASSERT(it != sampled.end(), "the runner returned no token for a request that samples");
    const auto& emitted = it->second;
    MOXI_ASSERT(!emitted.empty() && int64_t(emitted.size()) <= 1 + s.lookahead,
                "the runner returned more tokens than the step reserved");
    auto o = append(r, emitted, ended.count(s.id) > 0);
    // The step computed its tokens and the kept drafts (every emitted token but the last). When the
    // request finished on an earlier token, the runner's caches hold positions the request never keeps:
    // nothing is committed (the sequence is freed below).
    if (o.new_tokens.size() == emitted.size()) {
      const int64_t computed = s.n_tokens() + int64_t(emitted.size()) - 1;
      memory_.commit(s.seq, r.keys, computed);
      r.num_computed += computed;
    }
    std::vector<request_output> fork_events;
    if (!s.forks.empty()) fork_children(r, s, sampled, ended, fork_events);
    if (o.finished != finish_reason::NONE) finish(r);
    events.push_back(std::move(o));
    for (auto& e : fork_events) events.push_back(std::move(e));
  }
  return events;
}

}  // namespace moxi::serve
