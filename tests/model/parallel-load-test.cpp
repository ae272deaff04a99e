// Rank-local loading (docs/distributed.md): every rank of a layout, loaded in this process with its place
// in the layout (no collective runs at load), reads only its stage's layers, its tensor-parallel slices and
// its experts. What its loader read is set against the planner's independent count of the same rank's
// bytes (model/plan.h rank_load_bytes, a sum over the manifest), and the ranks' slices are checked to tile
// each split tensor exactly.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "common/model-fixture.h"
#include "common/temp-dir.h"
#include "moxi/model/model.h"
#include "moxi/model/parallel.h"
#include "moxi/model/plan.h"

namespace moxi::model {
namespace {

class ParallelLoad : public testing::temp_dir_test {};

struct layout_case {
  int tp, ep, pp;
};

const std::vector<layout_case> kLayouts = {{2, 1, 1}, {1, 2, 1}, {1, 4, 1}, {1, 1, 2},
                                           {2, 2, 1}, {2, 1, 2}, {2, 2, 2}, {4, 4, 1}};

void check_config(const std::string& dir, const std::string& name) {
  const std::string ck = testing::init_test_checkpoint(dir, name + ".json", 7);
  const auto config = load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/" + name + ".json");
  const uint64_t whole = model::load(config, ck).checkpoint_bytes_read();
  EXPECT_EQ(whole, rank_load_bytes(config, 1, 1, 1, 0)) << name << ": one process";
  for (const auto& l : kLayouts) {
    const parallel_sizes sizes{l.tp, l.ep, l.pp};
    const int world = l.pp * std::lcm(l.tp, l.ep);
    uint64_t sum = 0;
    for (int r = 0; r < world; ++r) {
      load_options o;
      o.parallel = std::make_shared<parallel_layout>(parallel_layout::place(sizes, world, r));
      const auto m = model::load(config, ck, o);
      const uint64_t read = m.checkpoint_bytes_read();
      const uint64_t planned = rank_load_bytes(config, l.tp, l.ep, l.pp, r, world);
      EXPECT_NEAR(double(read), double(planned), 0.10 * double(planned))
          << name << " " << sizes.to_string() << " rank " << r;
      EXPECT_EQ(read, planned) << name << " " << sizes.to_string() << " rank " << r;
      sum += read;
    }
    // Within one replica of a stage the slices and expert blocks partition the split tensors: the ranks
    // together read at least the whole checkpoint and never less.
    EXPECT_GE(sum, whole) << name << " " << sizes.to_string();
  }
}

TEST_F(ParallelLoad, EveryRankReadsWhatThePlannerCountsForIt) {
  check_config(dir_, "tiny-seed");
  check_config(dir_, "tiny-deepseek-v3.2");
}

TEST_F(ParallelLoad, ARankHoldsOnlyItsLayersAndExperts) {
  const std::string ck = testing::init_test_checkpoint(dir_, "tiny-seed.json", 7);
  const auto config = load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json");
  const parallel_sizes sizes{2, 2, 2};
  load_options o;
  o.parallel = std::make_shared<parallel_layout>(parallel_layout::place(sizes, 4, 3));  // stage 1, tp/ep 1
  const auto m = model::load(config, ck, o);
  const auto [lo, hi] = parallel_layout::stage_layers(config.num_layers, 2, 1);
  EXPECT_EQ(lo, 3);
  EXPECT_EQ(hi, 5);
  for (const auto& name : m.tensors_read()) {
    if (!name.starts_with("model.layers.")) continue;
    const int64_t layer = std::stoll(name.substr(13));
    EXPECT_TRUE((layer >= lo && layer <= hi) || layer >= config.num_layers) << name;
    const size_t e = name.find(".experts.");
    if (e != std::string::npos) {
      const int64_t expert = std::stoll(name.substr(e + 9));
      EXPECT_GE(expert, 8) << name;  // ep rank 1 of 2 holds experts 8..15 of 16
    }
  }
  EXPECT_EQ(m.layer_config().kda->num_heads, config.kda->num_heads / 2);
  EXPECT_EQ(m.layer_config().mla->num_heads, config.mla->num_heads / 2);
  EXPECT_EQ(m.vision(), nullptr);  // the vision encoder lives on the first stage
}

}  // namespace
}  // namespace moxi::model
