// Serving a model with sliding-window layers (configs/tiny-hybrid-swa.json with a 6-token window, so rings
// wrap within a request) and one with Gated DSA layers (configs/tiny-seed.json): the scheduler, the hybrid
// memory and the real executor, with chunked prefill, prefix reuse of a shared prompt prefix (the ring
// restored from its block-boundary snapshot) and preemption by recompute under a small block pool, which
// frees and readmits sequences (their ids reused) while the executor keeps each sequence's gathered MLA rows
// from step to step. Every greedy token the server produces must be an argmax of the logits of a fresh,
// cache-free forward over the request's whole history (within fp32 rounding: the served logits come from
// chunks and batches, the reference from one pass).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "common/temp-dir.h"
#include "moxi/kernels/backend.h"
#include "moxi/memory/hybrid-memory.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/model.h"
#include "moxi/serve/engine-core.h"
#include "moxi/serve/executor.h"
#include "moxi/serve/scheduler.h"

namespace moxi::serve {
namespace {

void serve_and_recompute(const std::string& config_name, const std::function<void(nlohmann::json&)>& edit) {
  testing::temp_dir dir("moxi-swa-serve");
  std::ifstream in(std::string(MOXI_SOURCE_DIR) + "/configs/" + config_name);
  auto doc = nlohmann::json::parse(in);
  edit(doc);
  model::init_options io;
  io.seed = 12;
  io.show_progress = false;
  model::init_checkpoint(model::parse_model_config(doc, config_name), dir / "ckpt", io);
  kernels::backend_scope ref(kernels::reference());
  const auto m = model::model::load(dir / "ckpt");

  memory::memory_options mo;
  mo.block_size = 4;
  mo.num_blocks = 14;
  mo.num_state_slots = 8;
  mo.num_snapshot_slots = 32;
  memory::hybrid_memory mem(memory::cache_spec::from_config(m.config()), mo);
  scheduler_config sc;
  sc.max_num_batched_tokens = 16;
  sc.max_num_running = 4;
  sc.max_prefill_chunk = 7;
  scheduler sched(mem, sc);
  executor exec(m, mem);
  engine_core core(sched, exec);

  // Five requests: a shared 13-token prefix, then their own suffixes; two arrive later (prefix hits).
  std::mt19937 rng(3);
  auto draw = [&](int n) {
    std::vector<token_id> t(static_cast<size_t>(n));
    for (auto& x : t) x = token_id(3 + rng() % uint32_t(m.config().vocab_size - 3));
    return t;
  };
  const auto prefix = draw(13);
  std::map<request_id, std::vector<token_id>> history;
  auto add = [&](request_id id) {
    auto prompt = prefix;
    const auto suffix = draw(2 + int(id));
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    runtime::sampling_params sp;
    sp.temperature = 0;
    exec.add(id, sp, prompt, -1);
    sched.add_request(id, {prompt, 10, {}});
    history[id] = prompt;
  };
  for (request_id id = 1; id <= 3; ++id) add(id);
  std::map<request_id, size_t> prompt_len;
  for (auto& [id, h] : history) prompt_len[id] = h.size();
  for (int step = 0; sched.has_unfinished() || step < 6; ++step) {
    if (step == 5)
      for (request_id id = 4; id <= 5; ++id) add(id), prompt_len[id] = history[id].size();
    for (const auto& ev : core.step().outputs) {
      auto& h = history[ev.id];
      h.insert(h.end(), ev.new_tokens.begin(), ev.new_tokens.end());
      if (ev.finished != finish_reason::NONE) exec.remove(ev.id);
    }
    mem.check_invariants();
    ASSERT_LT(step, 10000);
  }
  // The run must have exercised what it is about.
  EXPECT_GT(sched.stats().preemptions, 0);
  EXPECT_GT(sched.stats().prefix_hit_tokens, 0);

  model::forward_options o;
  o.last_only = true;
  for (const auto& [id, h] : history) {
    SCOPED_TRACE(id);
    ASSERT_EQ(h.size(), prompt_len[id] + 10);
    for (size_t n = prompt_len[id]; n < h.size(); ++n) {
      const auto cache = m.new_cache();
      const auto logits = m.forward(std::span(h).first(n), *cache, o);
      const float best = *std::max_element(logits.begin(), logits.end());
      EXPECT_GE(logits[size_t(h[n])], best - 1e-4f * std::max(1.0f, std::abs(best))) << "token " << n;
    }
  }
  const auto st = mem.stats();
  EXPECT_EQ(st.free_blocks, st.num_blocks);
  EXPECT_EQ(st.free_state_slots, st.num_state_slots);
}

TEST(SwaServing, GreedyTokensMatchFullRecomputeWithPrefixReuseAndPreemption) {
  serve_and_recompute("tiny-hybrid-swa.json", [](nlohmann::json& doc) { doc["sliding_window"] = 6; });
}

TEST(MlaServing, GreedyTokensMatchFullRecomputeWithPrefixReuseAndPreemption) {
  serve_and_recompute("tiny-seed.json", [](nlohmann::json&) {});
}

}  // namespace
}  // namespace moxi::serve
