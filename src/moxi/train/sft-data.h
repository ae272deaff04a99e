// SFT data: tasks rendered as chats with the model's chat template (user = the task prompt, assistant = the
// reference), tokenized with a loss mask on the reply, right-padded into batches, in a deterministic order
// that is a pure function of (seed, step) so that a resumed run sees exactly the batches it would have seen.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moxi/eval/task.h"
#include "moxi/formats/chat-template.h"
#include "moxi/formats/tokenizer.h"
#include "moxi/image/preprocess.h"
#include "moxi/model/vision.h"
#include "moxi/train/losses.h"
#include "moxi/train/recipe.h"

namespace moxi::train {

// One tokenized conversation: target[j] = 1 where token j is trained (the reply and its end token).
struct sft_sample {
  std::vector<int64_t> tokens;
  std::vector<uint8_t> target;
  eval::domain domain = eval::domain::math;
  std::vector<std::string> images;  // PNG bytes of the task's pictures, in the order of their placeholders
};

// How a model with a vision encoder sees pictures: their preprocessing and the placeholder token each
// image's single template placeholder expands into (one per image token).
struct sample_vision {
  image::preprocess_config pre;
  int64_t placeholder = 0;
};
// From a config with a vision_config and media_placeholder_token_id; nullopt for a text-only model.
std::optional<sample_vision> sample_vision_of(const formats::model_config& c);

// A conversation as the model sees it: text it is given (the prompt, earlier user turns, the template's
// markers) and replies it is trained to write, each reply up to and including the end-of-turn marker `end`
// (whatever the template writes after it belongs to no reply and is not trained).
struct chat_segment {
  std::string text;
  bool trained = false;
};

// The task's history, its prompt as the last user turn and its reference as the reply, rendered with the
// template. Every assistant turn is trained when the template renders each earlier turn exactly as the model
// would have generated it (the rendering up to turn n's generation prompt extends the text of all turns
// before it); otherwise only the last reply is, after the whole conversation rendered as its prompt (what the
// model is given at inference either way).
std::vector<chat_segment> render_chat(const eval::task& t, const formats::chat_template& tpl,
                                      const std::string& end);

// Tokens = the segments encoded one by one (each reply on its own, as the model generates it after its
// prompt); target covers the trained segments' tokens. A task with pictures needs `vision`: each image's
// placeholder becomes as many placeholders as the image has tokens (never targets).
sft_sample make_sample(const eval::task& t, const formats::chat_template& tpl, const formats::tokenizer& tok,
                       const std::string& end, const sample_vision* vision = nullptr);

// A right-padded batch: rows shorter than the longest are filled with pad_id after their end; padding is
// neither a target nor valid.
struct sft_batch {
  torch::Tensor tokens;  // i64 [B, T]
  token_masks masks;     // target f32 [B, T], valid bool [B, T]
  int64_t tokens_real = 0, targets = 0;
  std::vector<image::patches> images;  // every row's pictures, rows in order (the placeholders' order)
  // The images as the encoder takes them (views of `images`).
  std::vector<model::image_input> image_inputs() const;
};
// length: pad to at least this many positions (data parallelism pads every rank's slice to the length of the
// global batch, so each row is computed in exactly the shape it has in a single process).
sft_batch make_batch(const std::vector<const sft_sample*>& rows, int64_t pad_id,
                     const sample_vision* vision = nullptr, int64_t length = 0);

// The order of batches: each epoch shuffles the samples (SplitMix64 Fisher-Yates seeded by seed and the
// epoch), cuts the shuffled list into chunks of 32 batches, sorts each chunk by length (less padding), cuts
// it into batches and shuffles the batches of the epoch. batch(step) depends only on (seed, step).
class batch_order {
 public:
  batch_order(std::vector<int64_t> lengths, int64_t batch_size, uint64_t seed);
  std::vector<size_t> batch(int64_t step);
  int64_t batches_per_epoch() const { return per_epoch_; }

 private:
  void build_epoch(int64_t epoch);
  std::vector<int64_t> lengths_;
  int64_t batch_size_, per_epoch_;
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  std::vector<std::vector<size_t>> epoch_batches_cache_;
};

// Tasks from a data source (a JSONL file or the generator).
std::vector<eval::task> load_tasks(const data_source& s);

}  // namespace moxi::train
