// The planner's activation term (docs/plan.md "Activations") against the heap a real forward holds: every
// operator new/delete of this test binary is counted, and the peak of live bytes during one prefill chunk
// (above what was live before it) is compared with what `moxi plan` predicts for that chunk, per config.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>

#include "common/model-fixture.h"
#include "common/temp-dir.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/x86/backend.h"
#include "moxi/model/cache.h"
#include "moxi/model/model.h"
#include "moxi/model/plan.h"

namespace {

std::atomic<int64_t> g_live{0}, g_peak{0};

void* counted_alloc(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  const int64_t live = g_live.fetch_add(int64_t(malloc_usable_size(p))) + int64_t(malloc_usable_size(p));
  int64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void counted_free(void* p) {
  if (!p) return;
  g_live.fetch_sub(int64_t(malloc_usable_size(p)));
  std::free(p);
}

}  // namespace

void* operator new(size_t n) { return counted_alloc(n); }
void* operator new[](size_t n) { return counted_alloc(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_alloc(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, size_t) noexcept { counted_free(p); }
void operator delete[](void* p, size_t) noexcept { counted_free(p); }

namespace {

using namespace moxi;

struct measured {
  double heap_bytes = 0, plan_bytes = 0;
};

// The peak heap of a forward of `rows` prompt tokens after `before` cached ones (the cache reserved up front,
// so only the forwards' own buffers count), against the plan's activation bytes at that chunk and context.
measured chunk_activations(const std::string& config_name, int64_t before, int64_t rows) {
  moxi::testing::temp_dir dir;
  const std::string ckpt = moxi::testing::init_test_checkpoint(dir.path(), config_name, 3);
  const auto config = model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/" + config_name);
  const model::model m = model::model::load(config, ckpt);
  model::contiguous_cache cache(m.config());
  cache.reserve(before + rows);
  const auto tokens = moxi::testing::random_token_ids(before + rows, config.vocab_size, 5);
  model::forward_options fo;
  fo.last_only = true;
  // Measured on a fresh thread, so the per-thread scratch the layers keep between calls (KDA's buffers) is
  // grown by these chunks and not left over from an earlier config. A 16-token warm-up first makes the
  // one-time allocations (the thread pool, the kernels' own scratch); the peak is then taken over a chunk of
  // `before` - 16 tokens and the measured one, which grows those buffers to its size.
  int64_t base = 0;
  std::thread([&] {
    m.forward(std::span(tokens).first(16), cache, fo);
    base = g_live.load();
    g_peak.store(base);
    m.forward(std::span(tokens).subspan(16, size_t(before - 16)), cache, fo);
    m.forward(std::span(tokens).subspan(size_t(before)), cache, fo);
  }).join();
  measured r;
  r.heap_bytes = double(g_peak.load() - base);

  model::plan_options po;
  po.context = before + rows;
  po.prefill_chunk = rows;
  po.cache = model::cache_format::F32;
  po.num_shards = 1;
  po.gpus_per_node = 1;
  po.dense_tiles = kernels::x86::dense_tile_min_tokens(kernels::active()) <= rows;
  r.plan_bytes = double(model::make_plan(config, po).stages.at(0).activation_bytes);
  std::printf("%s: %lld rows after %lld: heap peak %.0f KB, plan %.0f KB (plan / heap %.3f)\n",
              config_name.c_str(), (long long)rows, (long long)before, r.heap_bytes / 1e3, r.plan_bytes / 1e3,
              r.plan_bytes / r.heap_bytes);
  return r;
}

// The plan counts the buffers of the layer code (hidden rows, the heaviest attention or FFN); what it leaves
// out (RoPE tables per sequence, index lists, kernel-internal packs) is a small share.
TEST(ActivationPlan, PredictsTheHeapOfAPrefillChunk) {
  for (const char* name : {"tiny-seed.json", "tiny-kimi-linear.json", "tiny-deepseek-v3.2.json",
                           "tiny-hybrid-swa.json"})
    for (int64_t rows : {128, 512}) {
      const measured r = chunk_activations(name, rows, rows);
      EXPECT_GT(r.plan_bytes, 0.85 * r.heap_bytes) << name << " rows " << rows;
      EXPECT_LT(r.plan_bytes, 1.15 * r.heap_bytes) << name << " rows " << rows;
    }
}

// Without a chunk the plan counts no activations, and a device's memory is weights + cache.
TEST(ActivationPlan, ZeroChunkCountsNothing) {
  const auto config = model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json");
  model::plan_options po;
  po.prefill_chunk = 0;
  po.num_shards = 1;
  po.gpus_per_node = 1;
  const auto p = model::make_plan(config, po);
  EXPECT_EQ(p.stages.at(0).activation_bytes, 0u);
  EXPECT_EQ(p.device_bytes_max, p.stages.at(0).weight_bytes + p.stages.at(0).cache_bytes);
}

}  // namespace
