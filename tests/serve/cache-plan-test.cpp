// The planner's f32 cache (`moxi plan --cache-format f32`, model/layers/attention.h plan figures) against
// what the serving memory really allocates for one sequence (memory/cache-spec.h: a state slot and the
// blocks of its context), two independent accountings of the same caches: KDA + Gated DSA, KDA + sliding
// window + MLA, KDA + dense MLA.
#include <gtest/gtest.h>

#include <string>

#include "moxi/memory/cache-spec.h"
#include "moxi/model/config.h"
#include "moxi/model/plan.h"

namespace moxi::serve {
namespace {

TEST(CachePlan, F32PlanEqualsTheServingMemoryOfOneSequence) {
  for (const char* name :
       {"tiny-seed.json", "tiny-hybrid-swa.json", "tiny-kimi-linear.json", "bench-1.5b.json"}) {
    SCOPED_TRACE(name);
    auto c = model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/" + name);
    c.num_mtp_layers = 0;  // the planner counts the decoder's caches; the serving memory adds MTP slots
    const auto spec = memory::cache_spec::from_config(c);
    for (const int64_t context : {int64_t(4096), int64_t(131072)}) {
      model::plan_options o;
      o.context = context;
      o.cache = model::cache_format::F32;
      const auto plan = model::make_plan(c, o);
      const int64_t block = 16;
      const uint64_t served =
          spec.bytes_per_state_slot() + uint64_t(context / block) * spec.bytes_per_block(block);
      EXPECT_EQ(plan.cache_bytes_per_sequence, served) << context;
      // BF16 halves every element but the KDA recurrent state (fp32 in both).
      o.cache = model::cache_format::BF16;
      EXPECT_LT(model::make_plan(c, o).cache_bytes_per_sequence, served);
    }
  }
}

}  // namespace
}  // namespace moxi::serve
