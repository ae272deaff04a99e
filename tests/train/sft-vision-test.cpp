// SFT on tasks with pictures (train/sft-data.h): a vision task's one template placeholder becomes one per
// image token (never a target), the batch carries the decoded patches in placeholder order, and a few AdamW
// steps on a handful of vision conversations lower the loss with gradients reaching the vision tower.
#include <gtest/gtest.h>

#include "moxi/base/error.h"
#include "moxi/eval/task-generator.h"
#include "moxi/formats/bpe-trainer.h"
#include "moxi/formats/byte-tokenizer.h"
#include "moxi/formats/chat-template.h"
#include "moxi/model/config.h"
#include "moxi/train/losses.h"
#include "moxi/train/model.h"
#include "moxi/train/sft-data.h"

namespace moxi::train {
namespace {

formats::model_config tiny_vl() {
  return model::load_model_config(std::string(MOXI_SOURCE_DIR) + "/recipes/moxi-tiny-vl/config.json");
}

formats::tokenizer byte_tokenizer(const formats::model_config& c) {
  // The trainer's specials in its order, <|media_pad|> at the config's id (7).
  std::map<int64_t, std::string> specials;
  const auto names = formats::default_special_tokens();
  for (size_t i = 0; i < names.size(); ++i) specials[int64_t(i)] = names[i];
  specials[*c.media_placeholder_token_id] = "<|media_pad|>";
  return formats::tokenizer::from_hf_json(formats::byte_level_tokenizer_json(c.vocab_size, specials), "bytes");
}

formats::chat_template moxi_tiny_template() {
  return formats::chat_template(std::string(formats::moxi_tiny_chat_template()), "moxi-tiny");
}

TEST(SftVision, PlaceholdersExpandToImageTokensAndAreNeverTargets) {
  const auto c = tiny_vl();
  const auto tok = byte_tokenizer(c);
  const auto tpl = moxi_tiny_template();
  const auto vision = sample_vision_of(c);
  ASSERT_TRUE(vision);
  const auto tasks = eval::generate_tasks(eval::domain::vision, eval::split::train, 4, 1);
  std::vector<sft_sample> samples;
  for (const auto& t : tasks) {
    const auto s = make_sample(t, tpl, tok, "<|end|>", &*vision);
    int64_t pads = 0;
    for (size_t j = 0; j < s.tokens.size(); ++j)
      if (s.tokens[j] == 7) {
        ++pads;
        EXPECT_EQ(s.target[j], 0) << t.id;
      }
    EXPECT_EQ(pads, 9) << t.id;  // 84 x 84 pixels: 6 x 6 patches, 2 x 2 merged
    EXPECT_EQ(s.images, t.images);
    samples.push_back(s);
  }
  // Without a vision config a task with pictures is refused by name.
  EXPECT_THROW(make_sample(tasks[0], tpl, tok, "<|end|>", nullptr), error);
  std::vector<const sft_sample*> rows;
  for (const auto& s : samples) rows.push_back(&s);
  const auto b = make_batch(rows, 0, &*vision);
  ASSERT_EQ(b.images.size(), 4u);
  for (const auto& p : b.images) {
    EXPECT_EQ(p.grid_h, 6);
    EXPECT_EQ(p.grid_w, 6);
  }
}

TEST(SftVision, StepsOnPicturesLowerTheLossAndTrainTheTower) {
  torch::manual_seed(0);
  const auto c = tiny_vl();
  const auto tok = byte_tokenizer(c);
  const auto tpl = moxi_tiny_template();
  const auto vision = sample_vision_of(c);
  auto m = train_model::init(c, 3);
  std::vector<sft_sample> samples;
  for (const auto& t : eval::generate_tasks(eval::domain::vision, eval::split::train, 8, 4))
    samples.push_back(make_sample(t, tpl, tok, "<|end|>", &*vision));
  std::vector<const sft_sample*> rows;
  for (const auto& s : samples) rows.push_back(&s);
  const auto b = make_batch(rows, 0, &*vision);
  std::vector<torch::Tensor> params;
  for (auto& [name, p] : m.params()) params.push_back(p);
  torch::optim::Adam opt(params, torch::optim::AdamOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 25; ++step) {
    opt.zero_grad();
    auto loss = training_loss(m, b.tokens, {}, b.masks, m.encode_images(b.image_inputs()));
    loss.ce.backward();
    if (step == 0) {
      first = loss.ce.item<double>();
      const auto& g = m.params().at("vision_tower.patch_embed.proj.weight").grad();
      ASSERT_TRUE(g.defined());
      EXPECT_GT(g.abs().max().item<double>(), 0);
    }
    last = loss.ce.item<double>();
    opt.step();
  }
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;
}

}  // namespace
}  // namespace moxi::train
