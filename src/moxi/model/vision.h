// The MoonViT vision encoder and the Kimi-VL projector on the CPU kernels (docs/vision.md, docs/kimi-linear.md
// §5): 14 x 14 patches embedded by one matmul (the stride-14 convolution), the learned position table
// bicubically interpolated to each image's grid, pre-LayerNorm blocks with 2-D rotary position embedding and
// attention that stays inside each image (images packed into one sequence, block-diagonal attention), a
// final LayerNorm, the 2 x 2 patch merge, then LayerNorm -> Linear -> GELU -> Linear into the language
// model's hidden size. One row of the result replaces one image placeholder token of the prompt.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/model/layers/weights.h"

namespace moxi::model {

// One preprocessed image: grid_h x grid_w patches, pixels f32 [grid_h * grid_w, 3, patch, patch] in
// row-major grid order (moxi/image/preprocess.h makes them from PNG/JPEG bytes).
struct image_input {
  int64_t grid_h = 0, grid_w = 0;
  std::span<const float> pixels;
};

class vision_encoder {
 public:
  // Reads vision_tower.* and multi_modal_projector.* (model/arch/blocks.cpp declares them).
  static vision_encoder load(weight_loader& ld, const formats::model_config& config);

  // Placeholder tokens an image of this grid becomes (one per merged 2 x 2 block of patches).
  int64_t tokens_of(int64_t grid_h, int64_t grid_w) const;
  // Throws moxi::error naming image i when its grid cannot be encoded (not a multiple of the merge kernel,
  // past the 512 x 512 rotary table, a pixel count that does not match the grid).
  void check(std::span<const image_input> images) const;
  // Every image's features in order: f32 [sum of tokens_of(image), text hidden]. Intermediates are dumped
  // under "vision.{patch_embed,pos_emb,blocks.{i}.{attn_out,out},final_norm,merged,projected}".
  std::vector<float> encode(std::span<const image_input> images, const dump_sink* dump = nullptr) const;

  const formats::vision_config& config() const { return v_; }
  int64_t text_hidden() const { return text_hidden_; }

 private:
  struct block {
    std::vector<float> norm0_w, norm0_b, norm1_w, norm1_b;
    linear wqkv, wo, fc0, fc1;
    std::vector<float> wqkv_b, wo_b, fc0_b, fc1_b;
  };
  // x f32 [L, d] of one image's patches -> attention output (before wo) into o f32 [L, d].
  void attention(const float* qkv, int64_t grid_h, int64_t grid_w, float* o) const;

  formats::vision_config v_;
  int64_t text_hidden_ = 0;
  linear patch_embed_;  // [d, 3 * p * p]: the stride-p convolution as a matmul over flattened patches
  std::vector<float> patch_embed_b_;
  std::vector<float> pos_emb_;  // f32 [pos_h, pos_w, d]
  std::vector<block> blocks_;
  std::vector<float> final_norm_w_, final_norm_b_;
  std::vector<float> pre_norm_w_, pre_norm_b_;
  linear linear_1_, linear_2_;
  std::vector<float> linear_1_b_, linear_2_b_;
  std::vector<float> rope_freq_;  // [head_dim / 4]: theta^(-4i / head_dim)
};

// PyTorch's F.interpolate(mode="bicubic", align_corners=False) of a [in_h, in_w, C] grid (channels last) to
// [out_h, out_w, C]: A = -0.75, source x = (dst + 0.5) * in / out - 0.5, borders clamped, no antialias.
std::vector<float> interpolate_bicubic(std::span<const float> src, int64_t in_h, int64_t in_w, int64_t C,
                                       int64_t out_h, int64_t out_w);

// The 2-D rotary embedding of MoonViT on x f32 [L, H, D] in place for a grid_h x grid_w image (patch l at row
// l / grid_w, column l % grid_w): interleaved pairs (x[2j], x[2j+1]); pair j = 2i rotates by column * freq[i],
// pair j = 2i + 1 by row * freq[i], freq[i] = theta^(-4i / D) for i < D / 4.
void rope_2d(float* x, int64_t grid_h, int64_t grid_w, int64_t H, int64_t D, std::span<const float> freq);

}  // namespace moxi::model
