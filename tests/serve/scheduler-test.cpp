// The scheduler with the fake model over a real hybrid memory: every step respects the token budget and the
// running cap, and every token any request receives equals the fake model's cache-free reference for its
// history, whether prefill is chunked or one-shot, prefixes hit or miss, requests are preempted under
// memory pressure or cancelled; memory returns to baseline afterwards.
#include "moxi/serve/scheduler.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <set>

#include "moxi/base/error.h"
#include "moxi/serve/engine-core.h"
#include "serve/fake-model.h"

namespace moxi::serve {
namespace {

using formats::attn_kind;
using memory::cache_spec;
using memory::hybrid_memory;
using memory::memory_options;

constexpr int32_t kVocab = 40;
constexpr token_id kEos = 0;

cache_spec hybrid_spec() {
  cache_spec s;
  s.layers = {attn_kind::KDA, attn_kind::MLA, attn_kind::KDA, attn_kind::KDA, attn_kind::MLA};
  s.latent_width = 6;
  s.index_width = 3;
  s.kda_heads = 2;
  s.kda_head_dim = 3;
  s.kda_conv_kernel = 4;
  return s;
}

cache_spec mla_only_spec() {
  cache_spec s = hybrid_spec();
  s.layers = {attn_kind::MLA, attn_kind::MLA};
  return s;
}

// Sliding-window layers beside KDA and MLA: a 3-row ring, shorter than a block, so that the window slides
// within every block and prefix reuse must restore the ring from its block-boundary snapshot.
cache_spec swa_hybrid_spec() {
  cache_spec s = hybrid_spec();
  s.layers = {attn_kind::KDA, attn_kind::SWA, attn_kind::MLA, attn_kind::SWA};
  s.swa_window = 3;
  s.swa_kv_dim = 4;
  return s;
}

memory_options mem(int32_t blocks, int32_t slots = 16, int32_t snapshots = 64, bool caching = true) {
  memory_options o;
  o.block_size = 4;
  o.num_blocks = blocks;
  o.num_state_slots = slots;
  o.num_snapshot_slots = snapshots;
  o.prefix_caching = caching;
  return o;
}

struct workload_request {
  request_id id;
  request_params params;
  int arrival_step = 0;                // added before this step
  int cancel_step = -1;                // cancelled before this step (if still running)
  std::vector<request_id> forks = {};  // parallel sampling: more choices of the same prompt
};

struct result {
  std::vector<token_id> tokens;
  finish_reason reason = finish_reason::NONE;
  int64_t cached = 0;
};

struct run_summary {
  std::map<request_id, result> results;
  scheduler_stats stats;
  int mixed_steps = 0;  // steps with both a prefill chunk and a decode token
};

std::vector<token_id> random_tokens(std::mt19937& rng, int n) {
  std::vector<token_id> t(static_cast<size_t>(n));
  for (auto& x : t) x = token_id(1 + rng() % (kVocab - 1));  // never the stop token
  return t;
}

// Runs a workload to completion, checking the per-step contract and the tokens against the reference.
// keep: speculative decoding's outcome per decode step with lookahead (fake_model::keep_drafts).
run_summary run(const cache_spec& spec, const memory_options& mo, const scheduler_config& sc,
                const std::vector<workload_request>& work,
                std::function<int64_t(request_id, int64_t)> keep = {}) {
  hybrid_memory memory(spec, mo);
  scheduler sched(memory, sc);
  fake_model model(memory, kVocab);
  model.keep_drafts = std::move(keep);
  run_summary sum;
  std::map<request_id, const workload_request*> by_id;
  std::map<request_id, size_t> fork_index;  // a fork's 1-based position among its parent's forks
  for (const auto& w : work) {
    by_id[w.id] = &w;
    for (size_t k = 0; k < w.forks.size(); ++k) by_id[w.forks[k]] = &w, fork_index[w.forks[k]] = k + 1;
  }
  for (int step = 0;; ++step) {
    for (const auto& w : work) {
      if (w.arrival_step == step) sched.add_request(w.id, w.params, w.forks);
      if (w.cancel_step == step) sched.cancel(w.id);
    }
    const bool more_arrivals = std::any_of(work.begin(), work.end(), [&](const auto& w) {
      return w.arrival_step > step || w.cancel_step > step;
    });
    if (!sched.has_unfinished() && !more_arrivals) break;
    EXPECT_LT(step, 100000) << "no progress";
    if (step >= 100000) break;

    const scheduler_output out = sched.schedule();
    EXPECT_LE(out.total_tokens, sc.max_num_batched_tokens) << "token budget at step " << step;
    EXPECT_LE(sched.num_running(), size_t(sc.max_num_running)) << "running cap at step " << step;
    int64_t total = 0;
    bool prefill = false, decode = false;
    for (const auto& s : out.scheduled) {
      EXPECT_GE(s.n_tokens(), 1);
      if (!s.forks.empty()) {
        EXPECT_TRUE(s.sample);
        EXPECT_EQ(s.start + s.n_tokens(), int64_t(by_id.at(s.id)->params.prompt.size()))
            << "fork at prompt end";
      }
      total += s.n_tokens() + s.lookahead;
      EXPECT_LE(s.lookahead, sc.num_speculative_tokens);
      if (s.lookahead > 0) {
        EXPECT_TRUE(s.sample && s.n_tokens() == 1) << "drafts only follow a decode token";
        const auto& p = by_id.at(s.id)->params;
        EXPECT_LE(int64_t(sum.results[s.id].tokens.size()) + 1 + s.lookahead, p.max_tokens)
            << "a step may not emit past max_tokens";
      }
      (s.sample && s.n_tokens() == 1 ? decode : prefill) = true;
    }
    EXPECT_EQ(total, out.total_tokens);
    sum.mixed_steps += prefill && decode;
    const auto sampled = model.execute(out);
    for (const auto& ev : sched.update(out, sampled)) {
      result& r = sum.results[ev.id];
      r.tokens.insert(r.tokens.end(), ev.new_tokens.begin(), ev.new_tokens.end());
      r.cached = ev.num_cached_tokens;
      if (ev.finished != finish_reason::NONE) r.reason = ev.finished;
    }
    memory.check_invariants();
  }
  // Baseline: every block free (cached ones are reclaimable), every state slot free.
  const auto st = memory.stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
  EXPECT_EQ(st.free_state_slots, st.num_state_slots);
  EXPECT_EQ(st.live_sequences, 0);
  EXPECT_EQ(sched.num_running() + sched.num_waiting(), 0u);
  // Every token equals the cache-free reference of its history.
  for (const auto& [id, r] : sum.results) {
    if (r.reason == finish_reason::ABORT) continue;
    std::vector<token_id> history = by_id.at(id)->params.prompt;
    for (size_t k = 0; k < r.tokens.size(); ++k) {
      const token_id ref = model.reference_next(history);
      if (k == 0 && fork_index.count(id)) {
        // Forked: the fake model's k-th candidate; or the plain next token when its parent was cancelled
        // before the prefill ended and the fork ran as a request of its own.
        const token_id forked = token_id((ref + fork_index.at(id)) % kVocab);
        EXPECT_TRUE(r.tokens[k] == forked || r.tokens[k] == ref) << "fork " << id;
      } else {
        EXPECT_EQ(r.tokens[k], ref) << "request " << id << " token " << k;
      }
      history.push_back(r.tokens[k]);
    }
    EXPECT_NE(r.reason, finish_reason::NONE);
    if (r.reason == finish_reason::LENGTH) {
      EXPECT_EQ(int64_t(r.tokens.size()), by_id.at(id)->params.max_tokens);
    }
    if (r.reason == finish_reason::STOP) {
      EXPECT_EQ(r.tokens.back(), kEos);
    }
  }
  sum.stats = sched.stats();
  if (sc.num_speculative_tokens == 0) {
    EXPECT_EQ(sum.stats.scheduled_tokens, model.tokens_computed());
  }
  EXPECT_GE(sum.stats.scheduled_tokens, model.tokens_computed());
  return sum;
}

std::vector<workload_request> random_workload(uint32_t seed, int n, int max_prompt, int max_out, int spread) {
  std::mt19937 rng(seed);
  // A few shared prefixes (system prompts, earlier turns) so that the prefix cache has something to find.
  std::vector<std::vector<token_id>> prefixes;
  for (int i = 0; i < 3; ++i) prefixes.push_back(random_tokens(rng, 5 + int(rng() % 20)));
  std::vector<workload_request> work;
  for (int i = 0; i < n; ++i) {
    workload_request w;
    w.id = request_id(100 + i);
    if (rng() % 2) w.params.prompt = prefixes[rng() % prefixes.size()];
    const auto tail = random_tokens(rng, 1 + int(rng() % max_prompt));
    w.params.prompt.insert(w.params.prompt.end(), tail.begin(), tail.end());
    w.params.max_tokens = 1 + int64_t(rng() % max_out);
    w.params.stop_tokens = {kEos};
    w.arrival_step = spread ? int(rng() % spread) : 0;
    work.push_back(std::move(w));
  }
  return work;
}

std::map<request_id, std::vector<token_id>> tokens_of(const run_summary& s) {
  std::map<request_id, std::vector<token_id>> m;
  for (const auto& [id, r] : s.results) m[id] = r.tokens;
  return m;
}

scheduler_config cfg(int64_t budget, int32_t max_running, int64_t max_chunk = 0) {
  scheduler_config c;
  c.max_num_batched_tokens = budget;
  c.max_num_running = max_running;
  c.max_prefill_chunk = max_chunk;
  return c;
}

TEST(Scheduler, RespectsBudgetAndRunningCapAndMixesPrefillWithDecode) {
  const auto work = random_workload(1, 24, 30, 12, 10);
  const auto s = run(hybrid_spec(), mem(256), cfg(16, 4), work);
  EXPECT_EQ(s.results.size(), work.size());
  EXPECT_GT(s.mixed_steps, 0) << "prefill chunks and decode tokens share steps";
}

TEST(Scheduler, ChunkedPrefillGivesTheSameTokensAsOneShot) {
  for (const auto& spec : {hybrid_spec(), mla_only_spec(), swa_hybrid_spec()}) {
    const auto work = random_workload(2, 12, 40, 10, 0);
    const auto one_shot = run(spec, mem(512, 16, 64, false), cfg(4096, 16), work);
    const auto chunked = run(spec, mem(512, 16, 64, false), cfg(7, 16, 5), work);
    const auto tiny = run(spec, mem(512, 16, 64, false), cfg(1, 16), work);
    EXPECT_EQ(tokens_of(chunked), tokens_of(one_shot));
    EXPECT_EQ(tokens_of(tiny), tokens_of(one_shot));
    EXPECT_GT(chunked.stats.steps, one_shot.stats.steps);
  }
}

// Speculative decoding as the scheduler sees it: decode steps reserve lookahead positions, the runner keeps
// some drafts (computed like any position) and returns them before its sampled token; a stop token or
// max_tokens inside them ends the request there. Whatever is kept, the tokens equal plain decoding's, under
// chunked prefill, prefix reuse (snapshots only where a step really ended) and preemption.
TEST(Scheduler, KeptDraftsGiveTheTokensOfPlainDecoding) {
  for (const auto& spec : {hybrid_spec(), mla_only_spec(), swa_hybrid_spec()}) {
    const auto work = random_workload(5, 20, 24, 14, 8);
    for (const int32_t blocks : {512, 24}) {
      SCOPED_TRACE(blocks);
      const auto plain = run(spec, mem(blocks), cfg(32, 6, 5), work);
      auto sc = cfg(32, 6, 5);
      sc.num_speculative_tokens = 3;
      std::mt19937 rng(9);
      int64_t offered = 0, kept = 0;
      const auto spec_run = run(spec, mem(blocks), sc, work, [&](request_id, int64_t lookahead) {
        const int64_t k = int64_t(rng() % uint32_t(lookahead + 1));
        offered += lookahead;
        kept += k;
        return k;
      });
      EXPECT_EQ(tokens_of(spec_run), tokens_of(plain));
      EXPECT_GT(kept, 0);
      EXPECT_LT(kept, offered);
      EXPECT_LT(spec_run.stats.steps, plain.stats.steps) << "kept drafts save steps";
      if (blocks == 24) {
        EXPECT_GT(spec_run.stats.preemptions, 0);
      }
      EXPECT_GT(spec_run.stats.prefix_hit_tokens, 0);
    }
  }
}

TEST(Scheduler, NoChunkingWaitsUntilThePromptFitsWhole) {
  auto c = cfg(16, 4);
  c.chunked_prefill = false;
  std::mt19937 rng(3);
  std::vector<workload_request> work;
  for (int i = 0; i < 6; ++i) work.push_back({request_id(i), {random_tokens(rng, 6 + 2 * i), 4, {}}, 0, -1});
  const auto s = run(mla_only_spec(), mem(256), c, work);
  EXPECT_EQ(s.results.size(), work.size());
  EXPECT_EQ(tokens_of(s), tokens_of(run(mla_only_spec(), mem(256), cfg(4096, 4), work)));
}

TEST(Scheduler, PrefixHitGivesTheTokensOfAMissWithFewerComputed) {
  std::mt19937 rng(4);
  const auto system = random_tokens(rng, 37);
  std::vector<workload_request> work;
  for (int i = 0; i < 5; ++i) {
    workload_request w;
    w.id = request_id(i);
    w.params.prompt = system;
    if (i > 0) {
      const auto q = random_tokens(rng, 3 + i);  // request 1.. differ after the shared part
      w.params.prompt.insert(w.params.prompt.end(), q.begin(), q.end());
    }
    w.params.max_tokens = 9;
    w.arrival_step = i == 0 ? 0 : 30;  // after request 0 finished and cached its blocks
    work.push_back(std::move(w));
  }
  work.push_back({99, {system, 9, {}}, 40, -1});  // the identical prompt again
  for (const auto& spec : {hybrid_spec(), mla_only_spec(), swa_hybrid_spec()}) {
    const auto miss = run(spec, mem(256, 16, 64, false), cfg(64, 8), work);
    const auto hit = run(spec, mem(256, 16, 64, true), cfg(64, 8), work);
    EXPECT_EQ(tokens_of(hit), tokens_of(miss));
    EXPECT_LT(hit.stats.scheduled_tokens, miss.stats.scheduled_tokens);
    EXPECT_EQ(hit.results.at(0).cached, 0);
    for (request_id id : {1, 2, 3, 4}) EXPECT_EQ(hit.results.at(id).cached, 36) << "9 full blocks of the 37";
    EXPECT_EQ(hit.results.at(99).cached, 36) << "a whole-prompt hit still computes the last token";
    EXPECT_GT(hit.stats.prefix_hit_tokens, 0);
    EXPECT_EQ(miss.stats.prefix_hit_tokens, 0);
  }
}

TEST(Scheduler, HybridPrefillChunksEndOnBlockBoundariesForSnapshots) {
  hybrid_memory memory(hybrid_spec(), mem(64));
  scheduler sched(memory, cfg(100, 4));
  std::mt19937 rng(5);
  sched.add_request(1, {random_tokens(rng, 23), 2, {}});
  const auto out = sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].n_tokens(), 20) << "23 tokens: the first chunk stops at the boundary 20";
  EXPECT_FALSE(out.scheduled[0].sample);
  fake_model model(memory, kVocab);
  sched.update(out, model.execute(out));
  EXPECT_EQ(memory.stats().used_snapshot_slots, 1);
  const auto next = sched.schedule();
  EXPECT_EQ(next.scheduled.at(0).n_tokens(), 3);
  EXPECT_TRUE(next.scheduled.at(0).sample);
  sched.update(next, model.execute(next));
}

TEST(Scheduler, PreemptionUnderMemoryPressureKeepsEveryOutput) {
  for (const auto& spec : {hybrid_spec(), mla_only_spec(), swa_hybrid_spec()}) {
    for (uint32_t seed : {6u, 7u, 8u}) {
      const auto work = random_workload(seed, 16, 24, 20, 6);
      const auto ample = run(spec, mem(1024), cfg(32, 8), work);
      // 48 tokens' worth of blocks for 8 running requests of up to ~70 tokens each.
      const auto tight = run(spec, mem(18), cfg(32, 8), work);
      EXPECT_EQ(tokens_of(tight), tokens_of(ample));
      EXPECT_EQ(tight.results.size(), work.size());
      EXPECT_GT(tight.stats.preemptions, 0) << "the tight run must actually preempt";
      EXPECT_EQ(ample.stats.preemptions, 0);
    }
  }
}

TEST(Scheduler, CancellationFreesMemoryAtTheNextStep) {
  hybrid_memory memory(hybrid_spec(), mem(64, 4));
  scheduler sched(memory, cfg(8, 2));
  fake_model model(memory, kVocab);
  engine_core engine(sched, model);
  std::mt19937 rng(9);
  for (request_id id = 1; id <= 4; ++id) sched.add_request(id, {random_tokens(rng, 10), 50, {}});
  for (int i = 0; i < 6; ++i) engine.step();
  ASSERT_EQ(sched.num_running(), 2u);
  ASSERT_EQ(sched.num_waiting(), 2u);
  EXPECT_LT(memory.stats().free_blocks, memory.stats().num_blocks);
  sched.cancel(1);  // running
  sched.cancel(3);  // waiting
  sched.cancel(3);  // twice is harmless
  sched.cancel(12345);
  const auto out = sched.schedule();
  EXPECT_EQ(out.aborted, (std::vector<request_id>{1, 3}));
  for (const auto& s : out.scheduled) EXPECT_TRUE(s.id == 2 || s.id == 4);
  const auto events = sched.update(out, model.execute(out));
  int aborts = 0;
  for (const auto& e : events) aborts += e.finished == finish_reason::ABORT;
  EXPECT_EQ(aborts, 2);
  sched.cancel(2);
  sched.cancel(4);
  engine.step();
  EXPECT_FALSE(sched.has_unfinished());
  const auto st = memory.stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
  EXPECT_EQ(st.free_state_slots, st.num_state_slots);
  EXPECT_EQ(sched.stats().aborted, 4);
  memory.check_invariants();
  EXPECT_TRUE(engine.step().idle()) << "idle";
}

TEST(Scheduler, EndedRequestsFinishWithStopAndFreeTheirMemory) {
  // The runner's `ended` set (a complete constrained output) finishes a request with STOP on that token,
  // whatever the token is, and frees it like a stop token would; the others run on.
  hybrid_memory memory(hybrid_spec(), mem(64, 4));
  scheduler sched(memory, cfg(64, 4));
  fake_model model(memory, kVocab);
  std::mt19937 rng(11);
  sched.add_request(1, {random_tokens(rng, 8), 50, {}});
  sched.add_request(2, {random_tokens(rng, 8), 50, {}});
  auto out = sched.schedule();
  auto sampled = model.execute(out);
  auto events = sched.update(out, sampled, {2});
  ASSERT_EQ(events.size(), 2u);
  for (const auto& e : events) {
    ASSERT_EQ(e.new_tokens.size(), 1u);
    EXPECT_EQ(e.new_tokens, sampled.at(e.id));
    EXPECT_EQ(e.finished, e.id == 2 ? finish_reason::STOP : finish_reason::NONE) << e.id;
  }
  EXPECT_EQ(sched.num_running(), 1u);
  out = sched.schedule();
  events = sched.update(out, model.execute(out), {1});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].finished, finish_reason::STOP);
  EXPECT_FALSE(sched.has_unfinished());
  const auto st = memory.stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
  EXPECT_EQ(st.free_state_slots, st.num_state_slots);
  memory.check_invariants();
}

TEST(Scheduler, RandomWorkloadsNeverLeak) {
  for (uint32_t seed = 10; seed < 22; ++seed) {
    auto work = random_workload(seed, 30, 20, 16, 40);
    std::mt19937 rng(seed * 7);
    for (auto& w : work)
      if (rng() % 4 == 0) w.cancel_step = w.arrival_step + int(rng() % 12);
    for (auto& w : work)  // some requests sample several choices
      if (rng() % 5 == 0) w.forks = {w.id + 1000, w.id + 2000};
    const cache_spec spec = seed % 3 == 0 ? swa_hybrid_spec() : seed % 2 ? hybrid_spec() : mla_only_spec();
    const auto s = run(spec, mem(16 + int32_t(seed % 5) * 6, 6, 3 + seed % 3),
                       cfg(4 + seed % 13, 1 + int32_t(seed % 6), seed % 3 ? 0 : 3), work);
    size_t choices = 0;
    for (const auto& w : work) choices += 1 + w.forks.size();
    EXPECT_EQ(s.results.size(), choices) << "every request finished or was aborted, seed " << seed;
  }
}

TEST(Scheduler, ForksComputeThePromptOnceAndContinueIndependently) {
  std::mt19937 rng(23);
  const auto prompt = random_tokens(rng, 23);  // 5 full blocks of 4 + a partial one (copied at the fork)
  const int64_t max_tokens = 10;
  workload_request w{1, {prompt, max_tokens, {}}, 0, -1, {2, 3, 4}};
  for (const auto& spec : {hybrid_spec(), mla_only_spec(), swa_hybrid_spec()}) {
    const auto s = run(spec, mem(256), cfg(64, 8), {w});
    ASSERT_EQ(s.results.size(), 4u);
    std::set<std::vector<token_id>> distinct;
    for (request_id id : {1, 2, 3, 4}) {
      EXPECT_EQ(s.results.at(id).reason, finish_reason::LENGTH);
      EXPECT_EQ(int64_t(s.results.at(id).tokens.size()), max_tokens);
      distinct.insert(s.results.at(id).tokens);
    }
    EXPECT_EQ(distinct.size(), 4u) << "the choices diverge from their first token";
    // The prompt once, then every choice's own tokens but its last.
    EXPECT_EQ(s.stats.scheduled_tokens, 23 + 4 * (max_tokens - 1));
    // Alone, the same four prompts compute the prompt four times.
    std::vector<workload_request> separate;
    for (request_id id : {1, 2, 3, 4}) separate.push_back({id, {prompt, max_tokens, {}}, 0, -1});
    EXPECT_EQ(run(spec, mem(256, 16, 64, false), cfg(64, 8), separate).stats.scheduled_tokens,
              4 * (23 + max_tokens - 1));
  }
}

TEST(Scheduler, ForksWithoutMemoryOrSlotsRecomputeAndStillAgree) {
  std::mt19937 rng(24);
  std::vector<workload_request> work;
  for (request_id id = 1; id <= 3; ++id)
    work.push_back({id, {random_tokens(rng, 9 + int(id)), 12, {}}, 0, -1, {id + 10, id + 20, id + 30}});
  for (const auto& spec : {hybrid_spec(), mla_only_spec(), swa_hybrid_spec()}) {
    // 3 state slots for 12 choices; a running cap of 2; blocks for about 5 sequences.
    const auto s = run(spec, mem(24, 3, 8), cfg(16, 2), work);
    EXPECT_EQ(s.results.size(), 12u);
    EXPECT_GT(s.stats.scheduled_tokens, (10 + 11 + 12) + 12 * (12 - 1)) << "some forks had to recompute";
    for (const auto& [id, r] : s.results) EXPECT_EQ(r.reason, finish_reason::LENGTH) << id;
  }
  // A parent cancelled before its prefill ends leaves its forks running as requests of their own.
  work = {{1, {random_tokens(rng, 30), 6, {}}, 0, 1, {2, 3}}};
  const auto s = run(hybrid_spec(), mem(64), cfg(4, 4), work);
  EXPECT_EQ(s.results.at(1).reason, finish_reason::ABORT);
  EXPECT_EQ(s.results.at(2).reason, finish_reason::LENGTH);
  EXPECT_EQ(s.results.at(3).reason, finish_reason::LENGTH);
}

TEST(Scheduler, RejectsRequestsThatCanNeverRun) {
  hybrid_memory memory(hybrid_spec(), mem(8));
  scheduler sched(memory, cfg(16, 4));
  EXPECT_THROW(sched.add_request(1, {{}, 4, {}}), error);
  EXPECT_THROW(sched.add_request(1, {{1, 2}, 0, {}}), error);
  try {
    sched.add_request(7, {std::vector<token_id>(30, 1), 3, {}});  // 33 > 8 blocks * 4
    FAIL();
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("request 7"), std::string::npos) << e.what();
  }
  sched.add_request(1, {{1, 2}, 4, {}}, {2});
  EXPECT_THROW(sched.add_request(1, {{1, 2}, 4, {}}), error);
  EXPECT_THROW(sched.add_request(3, {{1, 2}, 4, {}}, {2}), error) << "fork id already in use";
  EXPECT_THROW(sched.add_request(4, {{1, 2}, 4, {}}, {5, 5}), error);
}

// A runner that fails on one chosen call and otherwise runs the fake model.
class failing_model final : public model_runner {
 public:
  failing_model(hybrid_memory& memory, int fail_at) : model_(memory, kVocab), fail_at_(fail_at) {}
  sampled_tokens execute(const scheduler_output& step) override {
    if (calls_++ == fail_at_) throw std::runtime_error("injected model failure");
    return model_.execute(step);
  }

 private:
  fake_model model_;
  int calls_ = 0, fail_at_;
};

TEST(Scheduler, EngineStepFailureCancelsTheStepAndFreesItsMemory) {
  hybrid_memory memory(hybrid_spec(), mem(64, 8));
  scheduler sched(memory, cfg(64, 4));
  failing_model model(memory, 2);
  engine_core engine(sched, model);
  std::mt19937 rng(3);
  sched.add_request(1, {random_tokens(rng, 9), 20, {}}, {101});
  sched.add_request(2, {random_tokens(rng, 5), 20, {}});
  sched.add_request(3, {random_tokens(rng, 7), 20, {}});
  EXPECT_TRUE(engine.step().error.empty());
  EXPECT_TRUE(engine.step().error.empty());
  sched.cancel(3);  // reported as aborted by the step that fails
  const auto failed = engine.step();
  EXPECT_EQ(failed.error, "injected model failure");
  std::set<request_id> ids(failed.failed.begin(), failed.failed.end());
  EXPECT_TRUE(ids.count(1) && ids.count(2) && ids.count(101)) << "every request of the failed step";
  ASSERT_EQ(failed.outputs.size(), 1u);
  EXPECT_EQ(failed.outputs[0].id, 3u);
  EXPECT_EQ(failed.outputs[0].finished, finish_reason::ABORT);
  const auto after = engine.step();  // frees the failed requests
  EXPECT_EQ(std::set<request_id>(after.scheduled.aborted.begin(), after.scheduled.aborted.end()), ids);
  EXPECT_FALSE(sched.has_unfinished());
  const auto st = memory.stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
  EXPECT_EQ(st.free_state_slots, st.num_state_slots);
  memory.check_invariants();
}

}  // namespace
}  // namespace moxi::serve
