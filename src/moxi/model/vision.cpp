// MoonViT + the Kimi-VL projector (docs/vision.md "Encoder"). Matched to the public Kimi-VL code (vLLM
// model_executor/models/moonvit.py and kimi_vl.py; docs/kimi-linear.md §5): tensor names, the fused wqkv
// row order (q, k, v, each heads-major), the GELU variants (tanh approximation inside the blocks, exact erf
// in the projector), LayerNorm eps 1e-5 everywhere, the interleaved rotary pairs with columns on even pairs.
#include "moxi/model/vision.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "moxi/base/error.h"
#include "moxi/kernels/backend.h"

namespace moxi::model {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // nn.LayerNorm's default, used by every MoonViT and projector norm
constexpr double kRopeTheta = 10000.0;  // Rope2DPosEmb(theta=10000)
constexpr int64_t kRopeMaxSide = 512;   // Rope2DPosEmb(max_height=512, max_width=512)

void gelu_tanh(float* x, size_t n) {    // "gelu_pytorch_tanh"
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  for (size_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(c * (v + 0.044715f * v * v * v)));
  }
}

void gelu_erf(float* x, size_t n) {  // transformers' GELUActivation: exact
  for (size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.7071067811865476f));
}

// PyTorch's cubic convolution weights for A = -0.75 at fraction t (upsample_bicubic2d).
void cubic_weights(float t, float w[4]) {
  const float A = -0.75f;
  auto near = [&](float x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };       // |x| <= 1
  auto far = [&](float x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };  // 1 < |x| < 2
  w[0] = far(t + 1);
  w[1] = near(t);
  w[2] = near(1 - t);
  w[3] = far(2 - t);
}

}  // namespace

std::vector<float> interpolate_bicubic(std::span<const float> src, int64_t in_h, int64_t in_w, int64_t C,
                                       int64_t out_h, int64_t out_w) {
  MOXI_ASSERT(int64_t(src.size()) == in_h * in_w * C && out_h > 0 && out_w > 0);
  std::vector<float> out(size_t(out_h * out_w * C));
  const float sy = float(in_h) / float(out_h), sx = float(in_w) / float(out_w);
  auto clamp = [](int64_t v, int64_t n) { return std::clamp<int64_t>(v, 0, n - 1); };
  std::vector<float> row(size_t(4 * C));
  for (int64_t oy = 0; oy < out_h; ++oy) {
    const float ry = sy * (float(oy) + 0.5f) - 0.5f;
    const int64_t iy = int64_t(std::floor(ry));
    float wy[4];
    cubic_weights(ry - float(iy), wy);
    for (int64_t ox = 0; ox < out_w; ++ox) {
      const float rx = sx * (float(ox) + 0.5f) - 0.5f;
      const int64_t ix = int64_t(std::floor(rx));
      float wx[4];
      cubic_weights(rx - float(ix), wx);
      // Along x for each of the 4 source rows, then along y, as PyTorch orders the sums.
      for (int j = 0; j < 4; ++j) {
        const float* r = src.data() + clamp(iy - 1 + j, in_h) * in_w * C;
        for (int64_t c = 0; c < C; ++c) {
          float s = 0;
          for (int i = 0; i < 4; ++i) s += r[clamp(ix - 1 + i, in_w) * C + c] * wx[i];
          row[size_t(j * C + c)] = s;
        }
      }
      float* o = out.data() + (oy * out_w + ox) * C;
      for (int64_t c = 0; c < C; ++c) {
        float s = 0;
        for (int j = 0; j < 4; ++j) s += row[size_t(j * C + c)] * wy[j];
        o[c] = s;
      }
    }
  }
  return out;
}

void rope_2d(float* x, int64_t grid_h, int64_t grid_w, int64_t H, int64_t D, std::span<const float> freq) {
  MOXI_ASSERT(D % 4 == 0 && int64_t(freq.size()) == D / 4);
  const int64_t pairs = D / 2;
  std::vector<float> cs(static_cast<size_t>(pairs)), sn(static_cast<size_t>(pairs));
  for (int64_t r = 0; r < grid_h; ++r)
    for (int64_t c = 0; c < grid_w; ++c) {
      for (int64_t j = 0; j < pairs; ++j) {
        const float angle = float(j % 2 == 0 ? c : r) * freq[size_t(j / 2)];  // fp32, as torch.outer
        cs[size_t(j)] = std::cos(angle);
        sn[size_t(j)] = std::sin(angle);
      }
      float* row = x + (r * grid_w + c) * H * D;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t j = 0; j < pairs; ++j) {
          float* p = row + h * D + 2 * j;
          const float a = p[0], b = p[1];
          p[0] = a * cs[size_t(j)] - b * sn[size_t(j)];
          p[1] = a * sn[size_t(j)] + b * cs[size_t(j)];
        }
    }
}

vision_encoder vision_encoder::load(weight_loader& ld, const formats::model_config& config) {
  if (!config.vision) throw error(config.source + ": the model has no vision_config");
  vision_encoder e;
  e.v_ = *config.vision;
  e.text_hidden_ = config.hidden_size;
  const auto& v = e.v_;
  const int64_t d = v.hidden_size, p = v.patch_size, I = v.intermediate_size;
  if ((d / v.num_heads) % 4)
    throw error(config.source + ": vision head size " + std::to_string(d / v.num_heads) +
                " must be a multiple of 4 (2-D rotary embedding)");
  const std::string t = "vision_tower";
  e.patch_embed_.w = ld.f32(t + ".patch_embed.proj.weight", {d, 3, p, p});
  e.patch_embed_.out = d;
  e.patch_embed_.in = 3 * p * p;
  e.patch_embed_b_ = ld.f32(t + ".patch_embed.proj.bias", {d});
  e.pos_emb_ = ld.f32(t + ".patch_embed.pos_emb.weight", {v.pos_emb_height, v.pos_emb_width, d});
  for (int64_t i = 0; i < v.num_layers; ++i) {
    const std::string b = t + ".encoder.blocks." + std::to_string(i);
    block blk;
    blk.norm0_w = ld.f32(b + ".norm0.weight", {d});
    blk.norm0_b = ld.f32(b + ".norm0.bias", {d});
    blk.norm1_w = ld.f32(b + ".norm1.weight", {d});
    blk.norm1_b = ld.f32(b + ".norm1.bias", {d});
    blk.wqkv = ld.lin(b + ".wqkv", 3 * d, d);
    blk.wqkv_b = ld.f32(b + ".wqkv.bias", {3 * d});
    blk.wo = ld.lin(b + ".wo", d, d);
    blk.wo_b = ld.f32(b + ".wo.bias", {d});
    blk.fc0 = ld.lin(b + ".mlp.fc0", I, d);
    blk.fc0_b = ld.f32(b + ".mlp.fc0.bias", {I});
    blk.fc1 = ld.lin(b + ".mlp.fc1", d, I);
    blk.fc1_b = ld.f32(b + ".mlp.fc1.bias", {d});
    e.blocks_.push_back(std::move(blk));
  }
  e.final_norm_w_ = ld.f32(t + ".encoder.final_layernorm.weight", {d});
  e.final_norm_b_ = ld.f32(t + ".encoder.final_layernorm.bias", {d});
  const int64_t merged = d * v.merge_kernel * v.merge_kernel;
  const std::string pr = "multi_modal_projector";
  e.pre_norm_w_ = ld.f32(pr + ".pre_norm.weight", {d});
  e.pre_norm_b_ = ld.f32(pr + ".pre_norm.bias", {d});
  e.linear_1_ = ld.lin(pr + ".linear_1", merged, merged);
  e.linear_1_b_ = ld.f32(pr + ".linear_1.bias", {merged});
  e.linear_2_ = ld.lin(pr + ".linear_2", config.hidden_size, merged);
  e.linear_2_b_ = ld.f32(pr + ".linear_2.bias", {config.hidden_size});
  const int64_t D = d / v.num_heads;
  for (int64_t i = 0; i < D / 4; ++i)
    e.rope_freq_.push_back(float(1.0 / std::pow(kRopeTheta, double(4 * i) / double(D))));
  return e;
}

int64_t vision_encoder::tokens_of(int64_t grid_h, int64_t grid_w) const {
  return (grid_h / v_.merge_kernel) * (grid_w / v_.merge_kernel);
}

void vision_encoder::check(std::span<const image_input> images) const {
  const int64_t m = v_.merge_kernel, p = v_.patch_size;
  for (size_t i = 0; i < images.size(); ++i) {
    const auto& im = images[i];
    const std::string what = "image " + std::to_string(i + 1) + ": ";
    if (im.grid_h <= 0 || im.grid_w <= 0 || im.grid_h % m || im.grid_w % m)
      throw error(what + "a grid of " + std::to_string(im.grid_h) + " x " + std::to_string(im.grid_w) +
                  " patches; both sides must be positive multiples of the merge kernel " + std::to_string(m));
    if (im.grid_h >= kRopeMaxSide || im.grid_w >= kRopeMaxSide)
      throw error(what + "a grid of " + std::to_string(im.grid_h) + " x " + std::to_string(im.grid_w) +
                  " patches; MoonViT's rotary table covers fewer than " + std::to_string(kRopeMaxSide) +
                  " per side");
    if (int64_t(im.pixels.size()) != im.grid_h * im.grid_w * 3 * p * p)
      throw error(what + std::to_string(im.pixels.size()) + " pixel values for a " +
                  std::to_string(im.grid_h) + " x " + std::to_string(im.grid_w) + " grid of 3 x " +
                  std::to_string(p) + " x " + std::to_string(p) + " patches");
  }
}

void vision_encoder::attention(const float* qkv, int64_t grid_h, int64_t grid_w, float* o) const {
  const int64_t d = v_.hidden_size, H = v_.num_heads, D = d / H, L = grid_h * grid_w;
  const auto& k = kernels::active();
  std::vector<float> q(size_t(L * d)), kk(size_t(L * d));
  for (int64_t l = 0; l < L; ++l) {
    std::memcpy(q.data() + l * d, qkv + l * 3 * d, size_t(d) * sizeof(float));
    std::memcpy(kk.data() + l * d, qkv + l * 3 * d + d, size_t(d) * sizeof(float));
  }
  rope_2d(q.data(), grid_h, grid_w, H, D, rope_freq_);
  rope_2d(kk.data(), grid_h, grid_w, H, D, rope_freq_);
  // Per head: S = Q K^T / sqrt(D) over the image's own patches only, softmax, O = S V. Query rows in tiles
  // so the score block stays small whatever the image size; the products run on the backend's GEMM.
  const int64_t tile = 256;
  std::vector<float> qh(size_t(L * D)), kh(size_t(L * D)), vt(size_t(D * L)),
      s(size_t(std::min(tile, L) * L)), oh(size_t(std::min(tile, L) * D));
  const float scale = 1.0f / std::sqrt(float(D));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t l = 0; l < L; ++l) {
      std::memcpy(qh.data() + l * D, q.data() + l * d + h * D, size_t(D) * sizeof(float));
      std::memcpy(kh.data() + l * D, kk.data() + l * d + h * D, size_t(D) * sizeof(float));
      for (int64_t j = 0; j < D; ++j) vt[size_t(j * L + l)] = qkv[l * 3 * d + 2 * d + h * D + j];
    }
    for (int64_t t0 = 0; t0 < L; t0 += tile) {
      const int64_t T = std::min(tile, L - t0);
      k.matmul(qh.data() + t0 * D, kh.data(), nullptr, s.data(), T, L, D);
      for (int64_t r = 0; r < T; ++r) {
        float* row = s.data() + r * L;
        float mx = -INFINITY;
        for (int64_t c = 0; c < L; ++c) mx = std::max(mx, row[c] *= scale);
        float sum = 0;
        for (int64_t c = 0; c < L; ++c) sum += row[c] = std::exp(row[c] - mx);
        const float inv = 1.0f / sum;
        for (int64_t c = 0; c < L; ++c) row[c] *= inv;
      }
      k.matmul(s.data(), vt.data(), nullptr, oh.data(), T, D, L);
      for (int64_t r = 0; r < T; ++r)
        std::memcpy(o + (t0 + r) * d + h * D, oh.data() + r * D, size_t(D) * sizeof(float));
    }
  }
}

std::vector<float> vision_encoder::encode(std::span<const image_input> images,
                                          const dump_sink* dump_to) const {
  check(images);
  const auto& k = kernels::active();
  const int64_t d = v_.hidden_size, I = v_.intermediate_size, m = v_.merge_kernel;
  int64_t L = 0, N = 0;
  for (const auto& im : images) L += im.grid_h * im.grid_w, N += tokens_of(im.grid_h, im.grid_w);
  if (L == 0) return {};

  // Patch embedding and the interpolated position table, image by image into the packed sequence.
  std::vector<float> x(size_t(L * d));
  std::vector<float> pos(size_t(L * d));
  for (int64_t at = 0; const auto& im : images) {
    const int64_t n = im.grid_h * im.grid_w;
    patch_embed_.apply(im.pixels.data(), x.data() + at * d, n, patch_embed_b_.data());
    if (im.grid_h == v_.pos_emb_height && im.grid_w == v_.pos_emb_width) {
      std::copy(pos_emb_.begin(), pos_emb_.end(), pos.begin() + at * d);
    } else {
      const auto t =
          interpolate_bicubic(pos_emb_, v_.pos_emb_height, v_.pos_emb_width, d, im.grid_h, im.grid_w);
      std::copy(t.begin(), t.end(), pos.begin() + at * d);
    }
    at += n;
  }
  dump(dump_to, "vision.patch_embed", {L, d}, x.data());
  dump(dump_to, "vision.pos_emb", {L, d}, pos.data());
  for (size_t i = 0; i < x.size(); ++i) x[i] += pos[i];

  std::vector<float> h(size_t(L * d)), qkv(size_t(L * 3 * d)), o(size_t(L * d)), f(size_t(L * I));
  for (size_t b = 0; b < blocks_.size(); ++b) {
    const block& blk = blocks_[b];
    const std::string name = "vision.blocks." + std::to_string(b);
    k.layer_norm(x.data(), blk.norm0_w.data(), blk.norm0_b.data(), h.data(), L, d, kLayerNormEps);
    blk.wqkv.apply(h.data(), qkv.data(), L, blk.wqkv_b.data());
    for (int64_t at = 0; const auto& im : images) {  // attention never crosses an image boundary
      attention(qkv.data() + at * 3 * d, im.grid_h, im.grid_w, o.data() + at * d);
      at += im.grid_h * im.grid_w;
    }
    blk.wo.apply(o.data(), h.data(), L, blk.wo_b.data());
    dump(dump_to, name + ".attn_out", {L, d}, h.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    k.layer_norm(x.data(), blk.norm1_w.data(), blk.norm1_b.data(), h.data(), L, d, kLayerNormEps);
    blk.fc0.apply(h.data(), f.data(), L, blk.fc0_b.data());
    gelu_tanh(f.data(), f.size());
    blk.fc1.apply(f.data(), h.data(), L, blk.fc1_b.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += h[i];
    dump(dump_to, name + ".out", {L, d}, x.data());
  }
  k.layer_norm(x.data(), final_norm_w_.data(), final_norm_b_.data(), x.data(), L, d, kLayerNormEps);
  dump(dump_to, "vision.final_norm", {L, d}, x.data());

  // Projector: LayerNorm per patch, then each m x m block of patches (row-major inside the block) becomes
  // one row of m*m*d, then Linear -> GELU -> Linear.
  k.layer_norm(x.data(), pre_norm_w_.data(), pre_norm_b_.data(), h.data(), L, d, kLayerNormEps);
  const int64_t md = m * m * d;
  std::vector<float> merged(size_t(N * md));
  for (int64_t at = 0, row = 0; const auto& im : images) {
    for (int64_t i = 0; i < im.grid_h / m; ++i)
      for (int64_t j = 0; j < im.grid_w / m; ++j, ++row)
        for (int64_t a = 0; a < m; ++a)
          for (int64_t b = 0; b < m; ++b) {
            const int64_t patch = at + (i * m + a) * im.grid_w + (j * m + b);
            std::memcpy(merged.data() + row * md + (a * m + b) * d, h.data() + patch * d,
                        size_t(d) * sizeof(float));
          }
    at += im.grid_h * im.grid_w;
  }
  dump(dump_to, "vision.merged", {N, md}, merged.data());
  std::vector<float> mid(size_t(N * md)), out(size_t(N * text_hidden_));
  linear_1_.apply(merged.data(), mid.data(), N, linear_1_b_.data());
  gelu_erf(mid.data(), mid.size());
  linear_2_.apply(mid.data(), out.data(), N, linear_2_b_.data());
  dump(dump_to, "vision.projected", {N, text_hidden_}, out.data());
  return out;
}

}  // namespace moxi::model
