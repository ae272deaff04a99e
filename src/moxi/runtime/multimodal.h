// Images in a prompt (docs/vision.md "Prompts"): decoded images preprocessed for a model's vision config,
// each image's single placeholder token (<|media_pad|>, config media_placeholder_token_id) expanded into one
// placeholder per image token, and the encoder's features that the forward pass puts in their place.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moxi/formats/tokenizer.h"
#include "moxi/image/image.h"
#include "moxi/image/preprocess.h"
#include "moxi/model/model.h"

namespace moxi::runtime {

// What a chat template writes for an image part (Kimi-VL's template); its <|media_pad|> is expanded.
inline constexpr std::string_view kImagePlaceholderText =
    "<|media_start|>image<|media_content|><|media_pad|><|media_end|>";

// The preprocessing a model's vision config implies (patch size, merge kernel; Kimi-VL's token limit,
// mean and std). Throws moxi::error when the model has no vision encoder or no placeholder token.
image::preprocess_config preprocess_config_of(const model::model& m);

struct prompt_image {
  image::patches patches;
  uint64_t hash = 0;  // image::content_hash of the decoded pixels
  int64_t tokens = 0;  // placeholder tokens it becomes
};
prompt_image prepare_image(const model::model& m, const image::rgb_image& img);

// tokens with the k-th placeholder token replaced by images[k].tokens placeholders. Throws moxi::error when
// the number of placeholders differs from the number of images.
std::vector<token_id> expand_image_placeholders(std::span<const token_id> tokens, token_id placeholder,
                                                std::span<const prompt_image> images);

// The encoder's features for the images in order, f32 [sum of tokens, hidden] (forward_options::media).
std::vector<float> encode_images(const model::model& m, std::span<const prompt_image> images);

// For `moxi generate --image`: a raw prompt holding fewer placeholder tokens than images gets the missing
// images' placeholder text in front (after a leading BOS), the way an image part precedes the text of a
// chat message. Returns the expanded tokens.
std::vector<token_id> raw_prompt_with_images(const model::model& m, const formats::tokenizer& tok,
                                             std::vector<token_id> tokens, std::span<const prompt_image> images);

}  // namespace moxi::runtime
