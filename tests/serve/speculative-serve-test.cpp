// Speculative decoding inside the serving engine (docs/speculative.md, "Serving"): the scheduler, the paged
// hybrid memory and the real executor drafting with the MTP head, on random tiny-seed (KDA + Gated DSA +
// MoE + MTP) and tiny-hybrid-swa (KDA + sliding window + MLA + MTP) checkpoints and the bundled trained
// model. Under chunked prefill, prefix reuse, preemption and parallel sampling (n = 2), greedy tokens with
// drafts must equal the same engine's without drafts token for token (reference kernels: bit-exact paths),
// and each must be an argmax of a fresh cache-free forward over the request's history. Sampled tokens must
// have the target model's distribution: the second token of a continuation (the one a verified draft can
// give) against the exact marginal computed from the model's own conditionals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "common/temp-dir.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/kernels/backend.h"
#include "moxi/memory/hybrid-memory.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/model.h"
#include "moxi/runtime/sampler.h"
#include "moxi/serve/engine-core.h"
#include "moxi/serve/executor.h"
#include "moxi/serve/scheduler.h"

namespace moxi::serve {
namespace {

model::model random_model(const std::string& config, const testing::temp_dir& dir, uint64_t seed) {
  std::ifstream in(std::string(MOXI_SOURCE_DIR) + "/configs/" + config);
  const auto doc = nlohmann::json::parse(in);
  model::init_options io;
  io.seed = seed;
  io.show_progress = false;
  model::init_checkpoint(model::parse_model_config(doc, config), dir / "ckpt", io);
  return model::model::load(dir / "ckpt");
}

struct engine_setup {
  int32_t num_blocks = 256;
  int64_t budget = 256, max_chunk = 0;
  int64_t draft_tokens = 0;
};

struct served {
  std::map<request_id, std::vector<token_id>> history;  // prompt, then every token served
  std::map<request_id, size_t> prompt_len;
  scheduler_stats stats;
  draft_stats drafts;
};

// Serves prompts greedily: the first three at once (the first with a fork, n = 2), the others at step 5.
served serve_workload(const model::model& m, const engine_setup& e,
                      const std::vector<std::vector<token_id>>& prompts, int64_t max_tokens) {
  memory::memory_options mo;
  mo.block_size = 4;
  mo.num_blocks = e.num_blocks;
  mo.num_state_slots = 8;
  mo.num_snapshot_slots = 32;
  memory::hybrid_memory mem(memory::cache_spec::from_config(m.config()), mo);
  scheduler_config sc;
  sc.max_num_batched_tokens = e.budget;
  sc.max_num_running = 4;
  sc.max_prefill_chunk = e.max_chunk;
  sc.num_speculative_tokens = e.draft_tokens;
  scheduler sched(mem, sc);
  executor exec(m, mem);
  exec.set_draft_tokens(e.draft_tokens);
  engine_core core(sched, exec);

  served s;
  runtime::sampling_params sp;
  sp.temperature = 0;
  auto add = [&](request_id id) {
    const auto& prompt = prompts[id - 1];
    std::vector<request_id> forks;
    if (id == 1) forks = {11};
    for (request_id r : forks)
      exec.add(r, sp, prompt, -1), s.history[r] = prompt, s.prompt_len[r] = prompt.size();
    exec.add(id, sp, prompt, -1);
    sched.add_request(id, {prompt, max_tokens, {}}, forks);
    s.history[id] = prompt;
    s.prompt_len[id] = prompt.size();
  };
  for (request_id id = 1; id <= std::min<request_id>(3, prompts.size()); ++id) add(id);
  for (int step = 0; sched.has_unfinished() || step < 6; ++step) {
    if (step == 5)
      for (request_id id = 4; id <= prompts.size(); ++id) add(id);
    for (const auto& ev : core.step().outputs) {
      auto& h = s.history[ev.id];
      h.insert(h.end(), ev.new_tokens.begin(), ev.new_tokens.end());
      if (ev.finished != finish_reason::NONE) exec.remove(ev.id);
    }
    mem.check_invariants();
    if (step > 20000) ADD_FAILURE() << "no progress";
    if (step > 20000) break;
  }
  const auto st = mem.stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
  EXPECT_EQ(st.free_state_slots, st.num_state_slots);
  s.stats = sched.stats();
  s.drafts = exec.drafts();
  return s;
}

// Every served token is an argmax of a fresh forward over the history before it (fp32 rounding apart).
void expect_greedy(const model::model& m, const served& s) {
  model::forward_options o;
  o.last_only = true;
  for (const auto& [id, h] : s.history) {
    SCOPED_TRACE(id);
    for (size_t n = s.prompt_len.at(id); n < h.size(); ++n) {
      const auto cache = m.new_cache();
      const auto logits = m.forward(std::span(h).first(n), *cache, o);
      const float best = *std::max_element(logits.begin(), logits.end());
      EXPECT_GE(logits[size_t(h[n])], best - 1e-4f * std::max(1.0f, std::abs(best))) << "token " << n;
    }
  }
}

// Five random prompts over a shared 13-token prefix (the two arriving later hit it in the prefix cache);
// with `long_one`, the third is longer than a KDA chunk (64 tokens).
std::vector<std::vector<token_id>> random_prompts(const model::model& m, bool long_one) {
  std::mt19937 rng(3);
  auto draw = [&](int n) {
    std::vector<token_id> t(static_cast<size_t>(n));
    for (auto& x : t) x = token_id(3 + rng() % uint32_t(m.config().vocab_size - 3));
    return t;
  };
  const auto prefix = draw(13);
  std::vector<std::vector<token_id>> prompts;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back(prefix);
    const auto suffix = draw(i == 2 && long_one ? 70 : 2 + i);
    prompts.back().insert(prompts.back().end(), suffix.begin(), suffix.end());
  }
  return prompts;
}

void check_model(const model::model& m, int64_t max_tokens) {
  // Small blocks and budget: chunked prefill, preemption; large: whole prompts (the 83-token one crosses a
  // KDA chunk in one forward).
  for (const engine_setup base : {engine_setup{14, 16, 7, 0}, engine_setup{256, 256, 0, 0}}) {
    SCOPED_TRACE(base.num_blocks);
    const auto prompts = random_prompts(m, base.num_blocks > 64);
    const served plain = serve_workload(m, base, prompts, max_tokens);
    if (base.num_blocks == 14) {
      EXPECT_GT(plain.stats.preemptions, 0);
    }
    EXPECT_GT(plain.stats.prefix_hit_tokens, 0);
    for (int64_t k : {1, 3}) {
      SCOPED_TRACE(k);
      engine_setup e = base;
      e.draft_tokens = k;
      const served spec = serve_workload(m, e, prompts, max_tokens);
      EXPECT_EQ(spec.history, plain.history) << "greedy tokens with drafts equal those without";
      EXPECT_GT(spec.drafts.steps, 0);
      EXPECT_GE(spec.drafts.drafted, spec.drafts.steps);
      EXPECT_LE(spec.drafts.drafted, k * spec.drafts.steps);
      int64_t by_pos = 0;
      for (int64_t a : spec.drafts.accepted_at) by_pos += a;
      EXPECT_EQ(by_pos, spec.drafts.accepted);
      EXPECT_LE(spec.drafts.accepted, spec.drafts.drafted);
      if (k == 3 && base.num_blocks == 256) expect_greedy(m, spec);
    }
  }
}

TEST(SpeculativeServing, GreedyTokensEqualPlainServingTinySeed) {
  testing::temp_dir dir("moxi-spec-serve");
  kernels::backend_scope ref(kernels::reference());
  check_model(random_model("tiny-seed.json", dir, 21), 12);
}

TEST(SpeculativeServing, GreedyTokensEqualPlainServingHybridSwa) {
  testing::temp_dir dir("moxi-spec-serve");
  kernels::backend_scope ref(kernels::reference());
  check_model(random_model("tiny-hybrid-swa.json", dir, 22), 12);
}

TEST(SpeculativeServing, TheTrainedModelKeepsDraftsAndServesThePlainTokens) {
  kernels::backend_scope ref(kernels::reference());
  const std::string dir = std::string(MOXI_SOURCE_DIR) + "/models/moxi-small";
  const auto m = model::model::load(dir);
  const auto tok = formats::tokenizer::from_hf_json_file(dir + "/tokenizer.json");
  std::vector<std::vector<token_id>> prompts;
  for (const char* q :
       {"What is 4821 * 37?", "What is 93 + 458?", "How many lines are in notes.txt?", "What is 702 - 39?"})
    prompts.push_back(tok.encode(std::string("<|bos|><|user|>") + q + "<|end|>\n<|assistant|>"));
  engine_setup e;
  const served plain = serve_workload(m, e, prompts, 40);
  e.draft_tokens = 2;
  const served spec = serve_workload(m, e, prompts, 40);
  EXPECT_EQ(spec.history, plain.history);
  // A trained MTP head's drafts are kept far more often than chance (1 in 2048 for random tokens).
  EXPECT_GT(spec.drafts.accepted * 5, spec.drafts.drafted)
      << spec.drafts.accepted << " of " << spec.drafts.drafted;
  EXPECT_LT(spec.stats.steps, plain.stats.steps);
}

TEST(SpeculativeServing, ASampledSecondTokenHasTheTargetMarginal) {
  // tiny-seed at temperature 1: the second token of a continuation comes from a verified draft or from a
  // resample. Its distribution must be sum_t1 p(t1) p(t2 | t1), computed here with cache-free forwards.
  testing::temp_dir dir("moxi-spec-serve");
  kernels::backend_scope ref(kernels::reference());
  const auto m = random_model("tiny-seed.json", dir, 23);
  const int64_t V = m.config().vocab_size;
  const std::vector<token_id> prompt = {5, 17, 250, 9};
  runtime::sampling_params sp;
  sp.temperature = 0.6f;
  auto dist = [&](std::span<const token_id> h) {
    const auto cache = m.new_cache();
    model::forward_options o;
    o.last_only = true;
    return runtime::sampling_distribution(m.forward(h, *cache, o), sp);
  };
  const auto p1 = dist(prompt);
  std::vector<double> p2(size_t(V), 0.0);
  for (int64_t t = 0; t < V; ++t) {
    if (p1[size_t(t)] == 0) continue;
    auto h = prompt;
    h.push_back(token_id(t));
    const auto c = dist(h);
    for (int64_t u = 0; u < V; ++u) p2[size_t(u)] += p1[size_t(t)] * c[size_t(u)];
  }

  memory::memory_options mo;
  mo.block_size = 4;
  mo.num_blocks = 1024;
  mo.num_state_slots = 65;
  mo.num_snapshot_slots = 0;
  mo.prefix_caching = false;
  memory::hybrid_memory mem(memory::cache_spec::from_config(m.config()), mo);
  scheduler_config sc;
  sc.max_num_batched_tokens = 4096;
  sc.max_num_running = 64;
  sc.num_speculative_tokens = 2;
  scheduler sched(mem, sc);
  executor exec(m, mem);
  exec.set_draft_tokens(2);
  engine_core core(sched, exec);
  const int kDraws = 6000;
  std::vector<int64_t> count(size_t(V), 0);
  std::map<request_id, std::vector<token_id>> out;
  request_id next_id = 1;
  int done = 0;
  while (done < kDraws) {
    while (next_id <= request_id(kDraws) && sched.num_running() + sched.num_waiting() < 64) {
      auto s = sp;
      s.seed = next_id;
      exec.add(next_id, s, prompt, -1);
      sched.add_request(next_id, {prompt, 3, {}});
      ++next_id;
    }
    for (const auto& ev : core.step().outputs) {
      auto& o = out[ev.id];
      o.insert(o.end(), ev.new_tokens.begin(), ev.new_tokens.end());
      if (ev.finished == finish_reason::NONE) continue;
      ASSERT_EQ(o.size(), 3u);
      ++count[size_t(o[1])];
      out.erase(ev.id);
      exec.remove(ev.id);
      ++done;
    }
  }
  EXPECT_GT(exec.drafts().accepted, 0);
  EXPECT_LT(exec.drafts().accepted, exec.drafts().drafted);
  // Pearson chi-square: tokens expected at least 5 times are cells of their own, the rest one pooled cell.
  double chi2 = 0, pooled_e = 0, pooled_n = 0;
  int cells = 0;
  for (int64_t u = 0; u < V; ++u) {
    const double e = kDraws * p2[size_t(u)], n = double(count[size_t(u)]);
    if (e < 5) {
      pooled_e += e, pooled_n += n;
      continue;
    }
    chi2 += (n - e) * (n - e) / e;
    ++cells;
  }
  if (pooled_e > 0) chi2 += (pooled_n - pooled_e) * (pooled_n - pooled_e) / pooled_e, ++cells;
  // The 1e-6 upper quantile of chi2(df) by the Wilson-Hilferty approximation (z = 4.753).
  const double df = cells - 1, a = 2.0 / (9.0 * df);
  const double bound = df * std::pow(1.0 - a + 4.753 * std::sqrt(a), 3.0);
  EXPECT_GT(cells, 20);
  EXPECT_LT(chi2, bound) << cells << " cells";
  std::printf("second token: chi2 %.1f over %d cells (bound %.1f); drafts kept %lld of %lld\n", chi2, cells,
              bound, (long long)exec.drafts().accepted, (long long)exec.drafts().drafted);
}

}  // namespace
}  // namespace moxi::serve
