// Golden cross-check of the trainer's vision encoder (train/vision.cpp: libtorch's bicubic interpolate,
// layer_norm, gelu) against the engine's (model/vision.cpp on the scalar reference kernels) on a random
// tiny-seed checkpoint: image features at several grid sizes (the position table's own size, smaller,
// larger, non-square, images packed in one sequence) within 1e-4, the language model's logits with the
// features placed at the placeholder tokens, and gradients reaching every vision and projector parameter.
#include <gtest/gtest.h>

#include <random>

#include "common/temp-dir.h"
#include "common/vision-fixture.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/model.h"
#include "moxi/train/model.h"

namespace moxi {
namespace {

constexpr double kTol = 1e-4;  // max abs relative to max(1, max |engine|), fp32 both sides

class vision_golden_test : public testing::temp_dir_test {
 protected:
  void SetUp() override {
    temp_dir_test::SetUp();
    config_ = model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json");
    config_.media_placeholder_token_id = 7;
    ckpt_ = dir_ + "/tiny-seed";
    model::init_options o;
    o.seed = 23;
    o.float_type = dtype::F32;
    o.show_progress = false;
    model::init_checkpoint(config_, ckpt_, o);
  }
  formats::model_config config_;
  std::string ckpt_;
};

using image = testing::patch_image;

image random_image(int64_t gh, int64_t gw, uint64_t seed) {
  return testing::random_patch_image(gh, gw, seed);
}

std::vector<model::image_input> inputs(const std::vector<image>& ims) {
  return testing::image_inputs(ims);
}

double scaled_err(const float* got, const float* want, size_t n) {
  double err = 0, mx = 1;
  for (size_t i = 0; i < n; ++i) {
    err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
    mx = std::max(mx, std::fabs(double(want[i])));
  }
  return err / mx;
}

TEST_F(vision_golden_test, TrainerFeaturesEqualTheEngines) {
  kernels::backend_scope ref(kernels::reference());
  const auto engine = model::model::load(config_, ckpt_);
  const auto trainer = train::train_model::load(config_, ckpt_);
  const std::vector<std::vector<image>> cases = {{random_image(8, 8, 1)},
                                                 {random_image(2, 2, 2)},
                                                 {random_image(4, 10, 3)},
                                                 {random_image(12, 6, 4)},
                                                 {random_image(2, 4, 5), random_image(6, 2, 6), random_image(8, 8, 7)}};
  for (const auto& ims : cases) {
    // The engine's intermediates with their element counts, to name the stage where the two part.
    std::map<std::string, std::vector<float>> eng;
    model::dump_sink sink{[](std::string_view) { return true; },
                          [&](const std::string& name, const std::vector<int64_t>& shape, const float* data) {
                            int64_t n = 1;
                            for (auto s : shape) n *= s;
                            eng[name].assign(data, data + n);
                          }};
    const auto want = engine.vision()->encode(inputs(ims), &sink);
    train::dump_map tdump;
    torch::NoGradGuard no_grad;
    const auto got = trainer.encode_images(inputs(ims), &tdump).contiguous();
    ASSERT_EQ(size_t(got.numel()), want.size());
    // Locate the first intermediate that parts, in forward order, so a failure names the stage.
    for (const std::string name : {"vision.patch_embed", "vision.pos_emb", "vision.blocks.0.attn_out",
                                   "vision.blocks.0.out", "vision.blocks.1.out", "vision.final_norm",
                                   "vision.merged", "vision.projected"}) {
      ASSERT_TRUE(eng.count(name) && tdump.count(name)) << name;
      const auto t = tdump.at(name).contiguous();
      ASSERT_EQ(size_t(t.numel()), eng.at(name).size()) << name;
      EXPECT_LT(scaled_err(t.data_ptr<float>(), eng.at(name).data(), eng.at(name).size()), kTol)
          << name << ", first image " << ims[0].gh << "x" << ims[0].gw << ", " << ims.size() << " image(s)";
    }
    EXPECT_LT(scaled_err(got.data_ptr<float>(), want.data(), want.size()), kTol);
  }
}

TEST_F(vision_golden_test, LogitsWithImageFeaturesEqualTheEngines) {
  kernels::backend_scope ref(kernels::reference());
  const auto engine = model::model::load(config_, ckpt_);
  const auto trainer = train::train_model::load(config_, ckpt_);
  const auto ims = std::vector<image>{random_image(4, 4, 9)};  // 4 placeholder tokens
  const std::vector<token_id> tokens = {1, 40, 7, 7, 7, 7, 41, 99, 3};
  const auto feats = engine.vision()->encode(inputs(ims));
  auto cache = engine.new_cache();
  model::forward_options o;
  o.media = feats;
  const auto want = engine.forward(tokens, *cache, o);
  torch::NoGradGuard no_grad;
  auto tt = torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end())).view({1, -1});
  const auto media = trainer.encode_images(inputs(ims));
  const auto got = trainer.forward(tt, nullptr, nullptr, media).logits.contiguous();
  ASSERT_EQ(size_t(got.numel()), want.size());
  EXPECT_LT(scaled_err(got.data_ptr<float>(), want.data(), want.size()), kTol);
  // Without the features the placeholders are ordinary tokens, and the logits differ.
  const auto plain = trainer.forward(tt).logits.contiguous();
  EXPECT_GT(scaled_err(plain.data_ptr<float>(), want.data(), want.size()), 1e-3);
}

TEST_F(vision_golden_test, GradientsReachEveryVisionParameter) {
  auto trainer = train::train_model::load(config_, ckpt_);
  const auto ims = std::vector<image>{random_image(4, 6, 3), random_image(2, 2, 4)};
  const std::vector<token_id> tokens = {1, 7, 7, 7, 7, 7, 7, 7, 50};  // 6 + 1 placeholders
  auto tt = torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end())).view({1, -1});
  const auto out = trainer.forward(tt, nullptr, nullptr, trainer.encode_images(inputs(ims)));
  out.logits.pow(2).mean().backward();
  int checked = 0;
  for (const auto& d : trainer.manifest()) {
    if (d.group != model::param_group::VISION) continue;
    const auto& g = trainer.params().at(d.name).grad();
    ASSERT_TRUE(g.defined()) << d.name;
    EXPECT_GT(g.abs().max().item<double>(), 0.0) << d.name;
    ++checked;
  }
  EXPECT_EQ(checked, 3 + 2 * 12 + 2 + 6);  // patch embed + position table, 2 blocks, final norm, projector
}

}  // namespace
}  // namespace moxi
