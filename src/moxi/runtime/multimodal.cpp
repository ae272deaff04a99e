#include "moxi/runtime/multimodal.h"

#include <algorithm>

#include "moxi/base/error.h"

namespace moxi::runtime {

image::preprocess_config preprocess_config_of(const model::model& m) {
  const auto& c = m.config();
  if (!m.vision()) throw error(c.source + ": this model has no vision encoder (vision_config); it takes text only");
  if (!c.media_placeholder_token_id)
    throw error(c.source + ": the model has a vision encoder but no media_placeholder_token_id");
  image::preprocess_config p;
  p.patch_size = c.vision->patch_size;
  p.merge_kernel = c.vision->merge_kernel;
  return p;
}

prompt_image prepare_image(const model::model& m, const image::rgb_image& img) {
  prompt_image out;
  out.patches = image::preprocess(img, preprocess_config_of(m));
  out.hash = image::content_hash(img);
  out.tokens = m.vision()->tokens_of(out.patches.grid_h, out.patches.grid_w);
  return out;
}

std::vector<token_id> expand_image_placeholders(std::span<const token_id> tokens, token_id placeholder,
                                                std::span<const prompt_image> images) {
  std::vector<token_id> out;
  size_t k = 0;
  for (token_id t : tokens) {
    if (t != placeholder) {
      out.push_back(t);
      continue;
    }
    if (k < images.size()) out.insert(out.end(), size_t(images[k].tokens), placeholder);
    ++k;
  }
  if (k != images.size())
    throw error("the prompt has " + std::to_string(k) + " image placeholder(s) for " +
                std::to_string(images.size()) + " image(s)");
  return out;
}

std::vector<float> encode_images(const model::model& m, std::span<const prompt_image> images) {
  std::vector<model::image_input> in;
  for (const auto& im : images) in.push_back({im.patches.grid_h, im.patches.grid_w, im.patches.pixels});
  return m.vision()->encode(in);
}

std::vector<token_id> raw_prompt_with_images(const model::model& m, const formats::tokenizer& tok,
                                             std::vector<token_id> tokens, std::span<const prompt_image> images) {
  if (images.empty()) return tokens;
  preprocess_config_of(m);  // the model must take images
  const token_id pad = token_id(*m.config().media_placeholder_token_id);
  size_t have = 0;
  for (token_id t : tokens) have += t == pad;
  if (have < images.size()) {
    std::vector<token_id> front;
    for (size_t i = have; i < images.size(); ++i) {
      const auto block = tok.encode(std::string(kImagePlaceholderText), /*allow_special=*/true);
      if (std::count(block.begin(), block.end(), pad) != 1)
        throw error(m.config().source + ": the tokenizer does not encode <|media_pad|> as the config's "
                    "media_placeholder_token_id " + std::to_string(pad));
      front.insert(front.end(), block.begin(), block.end());
    }
    const auto bos = m.config().bos_token_id;
    const auto at = tokens.begin() + (bos && !tokens.empty() && tokens.front() == *bos ? 1 : 0);
    tokens.insert(at, front.begin(), front.end());
  }
  return expand_image_placeholders(tokens, pad, images);
}

}  // namespace moxi::runtime
