// See vision.h. Kimi-VL's layout (docs/kimi-linear.md §5): fused wqkv rows q | k | v (heads-major), 2-D
// rotary on interleaved pairs with columns on even pairs, attention within each image, LayerNorm eps 1e-5,
// GELU tanh in the blocks and exact GELU in the projector, 2 x 2 merge row-major inside each block.
#include "moxi/train/vision.h"

#include <cmath>

#include "moxi/base/error.h"

namespace moxi::train {

namespace F = torch::nn::functional;

namespace {

torch::Tensor layer_norm(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  return F::layer_norm(x, F::LayerNormFuncOptions({x.size(-1)}).weight(w).bias(b).eps(1e-5));
}

// x [n, H, D] rotated for an h x w grid: pair j of patch (r, c) turns by (j even ? c : r) * freq[j / 2].
torch::Tensor rope_2d(const torch::Tensor& x, int64_t h, int64_t w, const torch::Tensor& freq) {
  const auto idx = torch::arange(h * w, torch::kInt64);
  const auto col = (idx % w).to(torch::kFloat32), row = idx.div(w, "floor").to(torch::kFloat32);
  // angles [n, D/4, 2]: (column, row) per frequency, flattened to the D/2 pairs in order.
  const auto ang = torch::stack({torch::outer(col, freq), torch::outer(row, freq)}, -1).flatten(1);
  const auto c = ang.cos().unsqueeze(1), s = ang.sin().unsqueeze(1);  // [n, 1, D/2]
  const auto xr = x.unflatten(-1, {x.size(-1) / 2, 2});
  const auto a = xr.select(-1, 0), b = xr.select(-1, 1);
  return torch::stack({a * c - b * s, a * s + b * c}, -1).flatten(-2);
}

void put(std::map<std::string, torch::Tensor>* dump, const std::string& name, const torch::Tensor& t) {
  if (dump) (*dump)[name] = t.detach().clone();
}

}  // namespace

torch::Tensor vision_forward(const formats::model_config& config,
                             const std::function<const torch::Tensor&(const std::string&)>& p,
                             std::span<const model::image_input> images,
                             std::map<std::string, torch::Tensor>* dump) {
  if (!config.vision) throw error(config.source + ": the model has no vision_config");
  const auto& v = *config.vision;
  const int64_t d = v.hidden_size, H = v.num_heads, D = d / H, P = v.patch_size, m = v.merge_kernel;
  const std::string t = "vision_tower";
  auto freq = torch::empty({D / 4}, torch::kFloat32);
  for (int64_t i = 0; i < D / 4; ++i) freq[i] = float(1.0 / std::pow(10000.0, double(4 * i) / double(D)));

  std::vector<torch::Tensor> xs, poss;
  for (const auto& im : images) {
    const int64_t n = im.grid_h * im.grid_w;
    if (im.grid_h % m || im.grid_w % m || int64_t(im.pixels.size()) != n * 3 * P * P)
      throw error("vision_forward: an image of " + std::to_string(im.grid_h) + " x " + std::to_string(im.grid_w) +
                  " patches with " + std::to_string(im.pixels.size()) + " pixel values");
    const auto px = torch::from_blob(const_cast<float*>(im.pixels.data()), {n, 3 * P * P}, torch::kFloat32);
    xs.push_back(F::linear(px, p(t + ".patch_embed.proj.weight").view({d, -1}), p(t + ".patch_embed.proj.bias")));
    const auto& table = p(t + ".patch_embed.pos_emb.weight");  // [pos_h, pos_w, d]
    if (im.grid_h == v.pos_emb_height && im.grid_w == v.pos_emb_width) {
      poss.push_back(table.reshape({n, d}));
    } else {
      const auto up = F::interpolate(table.permute({2, 0, 1}).unsqueeze(0), F::InterpolateFuncOptions()
                                                                                .size(std::vector<int64_t>{im.grid_h, im.grid_w})
                                                                                .mode(torch::kBicubic)
                                                                                .align_corners(false));
      poss.push_back(up.squeeze(0).permute({1, 2, 0}).reshape({n, d}));
    }
  }
  auto x = torch::cat(xs), pos = torch::cat(poss);
  put(dump, "vision.patch_embed", x);
  put(dump, "vision.pos_emb", pos);
  x = x + pos;

  for (int64_t i = 0; i < v.num_layers; ++i) {
    const std::string b = t + ".encoder.blocks." + std::to_string(i);
    const auto h = layer_norm(x, p(b + ".norm0.weight"), p(b + ".norm0.bias"));
    const auto qkv = F::linear(h, p(b + ".wqkv.weight"), p(b + ".wqkv.bias")).view({-1, 3, H, D});
    std::vector<torch::Tensor> outs;
    int64_t at = 0;
    for (const auto& im : images) {  // attention inside each image only
      const int64_t n = im.grid_h * im.grid_w;
      const auto part = qkv.slice(0, at, at + n);
      const auto q = rope_2d(part.select(1, 0), im.grid_h, im.grid_w, freq).transpose(0, 1);  // [H, n, D]
      const auto k = rope_2d(part.select(1, 1), im.grid_h, im.grid_w, freq).transpose(0, 1);
      const auto val = part.select(1, 2).transpose(0, 1);
      const auto att = torch::softmax(torch::matmul(q, k.transpose(1, 2)) / std::sqrt(double(D)), -1);
      outs.push_back(torch::matmul(att, val).transpose(0, 1).reshape({n, d}));
      at += n;
    }
    const auto a = F::linear(torch::cat(outs), p(b + ".wo.weight"), p(b + ".wo.bias"));
    put(dump, "vision.blocks." + std::to_string(i) + ".attn_out", a);
    x = x + a;
    const auto h1 = layer_norm(x, p(b + ".norm1.weight"), p(b + ".norm1.bias"));
    const auto f = torch::gelu(F::linear(h1, p(b + ".mlp.fc0.weight"), p(b + ".mlp.fc0.bias")), "tanh");
    x = x + F::linear(f, p(b + ".mlp.fc1.weight"), p(b + ".mlp.fc1.bias"));
    put(dump, "vision.blocks." + std::to_string(i) + ".out", x);
  }
  x = layer_norm(x, p(t + ".encoder.final_layernorm.weight"), p(t + ".encoder.final_layernorm.bias"));
  put(dump, "vision.final_norm", x);

  const std::string pr = "multi_modal_projector";
  x = layer_norm(x, p(pr + ".pre_norm.weight"), p(pr + ".pre_norm.bias"));
  std::vector<torch::Tensor> merged;
  int64_t at = 0;
  for (const auto& im : images) {
    const int64_t n = im.grid_h * im.grid_w;
    merged.push_back(x.slice(0, at, at + n)
                         .view({im.grid_h / m, m, im.grid_w / m, m, d})
                         .permute({0, 2, 1, 3, 4})
                         .reshape({-1, m * m * d}));
    at += n;
  }
  auto y = torch::cat(merged);
  put(dump, "vision.merged", y);
  y = torch::gelu(F::linear(y, p(pr + ".linear_1.weight"), p(pr + ".linear_1.bias")));
  y = F::linear(y, p(pr + ".linear_2.weight"), p(pr + ".linear_2.bias"));
  put(dump, "vision.projected", y);
  return y;
}

}  // namespace moxi::train
