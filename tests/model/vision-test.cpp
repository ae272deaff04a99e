// The vision encoder (model/vision.h) against an fp64 MoonViT + Kimi-VL projector written here from the
// published description (docs/kimi-linear.md §5): patch convolution, bicubic position table (PyTorch's
// align_corners=False, A = -0.75), 2-D RoPE with interleaved pairs (columns on even pairs), attention that
// stays inside each image of a packed sequence, GELU tanh in the blocks and exact GELU in the projector, the
// 2 x 2 merge. Plus: packing images together changes nothing, and image features reach the language model
// exactly where its placeholder tokens are.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "common/model-fixture.h"
#include "common/temp-dir.h"
#include "common/vision-fixture.h"
#include "moxi/base/error.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/convert.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/config.h"
#include "moxi/model/model.h"
#include "moxi/model/vision.h"

namespace moxi::model {
namespace {

using vec = std::vector<double>;

class vision_test : public moxi::testing::temp_dir_test {
 protected:
  // tiny-seed: vision hidden 64, 4 heads of 16, 2 blocks, FFN 128, position table 8 x 8, patch 14, text
  // hidden 128.
  std::string checkpoint() {
    if (ckpt_.empty()) ckpt_ = moxi::testing::init_test_checkpoint(dir_, "tiny-seed.json", 11);
    return ckpt_;
  }
  formats::model_config config() {
    auto c = load_model_config(std::string(MOXI_SOURCE_DIR) + "/configs/tiny-seed.json");
    return c;
  }
  std::string ckpt_;
};

// Every tensor of the checkpoint in fp64.
struct weights64 {
  explicit weights64(const std::string& path) : ck(formats::checkpoint::open(path)) {}
  vec operator()(const std::string& name) const {
    const auto v = ck.view(name);
    std::vector<float> f(size_t(v.numel()));
    formats::to_f32(v.type, v.data, f.size(), f.data());
    return vec(f.begin(), f.end());
  }
  formats::checkpoint ck;
};

// y [T, N] = x [T, K] W^T + b.
vec affine64(const vec& x, const vec& W, const vec& b, int64_t T, int64_t N, int64_t K) {
  vec y(size_t(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = b.empty() ? 0.0 : b[size_t(n)];
      for (int64_t k = 0; k < K; ++k) s += x[size_t(t * K + k)] * W[size_t(n * K + k)];
      y[size_t(t * N + n)] = s;
    }
  return y;
}

vec layer_norm64(const vec& x, const vec& w, const vec& b, int64_t rows, int64_t D) {
  vec y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < D; ++i) mean += x[size_t(r * D + i)];
    mean /= double(D);
    for (int64_t i = 0; i < D; ++i) var += std::pow(x[size_t(r * D + i)] - mean, 2);
    var /= double(D);
    for (int64_t i = 0; i < D; ++i)
      y[size_t(r * D + i)] = (x[size_t(r * D + i)] - mean) / std::sqrt(var + 1e-5) * w[size_t(i)] + b[size_t(i)];
  }
  return y;
}

// Keys's cubic convolution kernel with a = -0.75 (PyTorch's bicubic), as a function of the distance.
double keys(double s) {
  const double a = -0.75;
  s = std::fabs(s);
  if (s <= 1) return (a + 2) * s * s * s - (a + 3) * s * s + 1;
  if (s < 2) return a * s * s * s - 5 * a * s * s + 8 * a * s - 4 * a;
  return 0;
}

// F.interpolate(bicubic, align_corners=False) of table [H, W, C] to [h, w, C], written as the 2-D sum over
// the 4 x 4 neighbourhood with clamped indices.
vec interpolate64(const vec& table, int64_t H, int64_t W, int64_t C, int64_t h, int64_t w) {
  vec out(size_t(h * w * C));
  for (int64_t oy = 0; oy < h; ++oy)
    for (int64_t ox = 0; ox < w; ++ox) {
      const double sy = (oy + 0.5) * double(H) / double(h) - 0.5, sx = (ox + 0.5) * double(W) / double(w) - 0.5;
      const int64_t fy = int64_t(std::floor(sy)), fx = int64_t(std::floor(sx));
      for (int64_t j = fy - 1; j <= fy + 2; ++j)
        for (int64_t i = fx - 1; i <= fx + 2; ++i) {
          const double k = keys(sy - double(j)) * keys(sx - double(i));
          const int64_t cj = std::clamp<int64_t>(j, 0, H - 1), ci = std::clamp<int64_t>(i, 0, W - 1);
          for (int64_t c = 0; c < C; ++c) out[size_t((oy * w + ox) * C + c)] += k * table[size_t((cj * W + ci) * C + c)];
        }
    }
  return out;
}

using image64 = moxi::testing::patch_image;

// The whole encoder + projector for images packed in one sequence, in fp64.
vec encode64(const weights64& W, const formats::model_config& c, const std::vector<image64>& images) {
  const auto& v = *c.vision;
  const int64_t d = v.hidden_size, H = v.num_heads, D = d / H, p = v.patch_size, I = v.intermediate_size;
  const std::string t = "vision_tower";
  int64_t L = 0;
  for (const auto& im : images) L += im.gh * im.gw;
  vec x;
  for (const auto& im : images) {
    const vec px(im.pixels.begin(), im.pixels.end());
    vec e = affine64(px, W(t + ".patch_embed.proj.weight"), W(t + ".patch_embed.proj.bias"), im.gh * im.gw, d,
                     3 * p * p);
    const vec pos = interpolate64(W(t + ".patch_embed.pos_emb.weight"), v.pos_emb_height, v.pos_emb_width, d,
                                  im.gh, im.gw);
    for (size_t i = 0; i < e.size(); ++i) e[i] += pos[i];
    x.insert(x.end(), e.begin(), e.end());
  }
  // Rotation of q/k pair j at grid (r, c): angle = (j even ? c : r) * 10000^(-4 floor(j/2) / D).
  auto rotate = [&](vec& q, int64_t l, int64_t r, int64_t col) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < D / 2; ++j) {
        const double ang = double(j % 2 == 0 ? col : r) * std::pow(10000.0, -4.0 * double(j / 2) / double(D));
        double& a = q[size_t(l * d + h * D + 2 * j)];
        double& b = q[size_t(l * d + h * D + 2 * j + 1)];
        const double na = a * std::cos(ang) - b * std::sin(ang), nb = a * std::sin(ang) + b * std::cos(ang);
        a = na, b = nb;
      }
  };
  for (int64_t blk = 0; blk < v.num_layers; ++blk) {
    const std::string b = t + ".encoder.blocks." + std::to_string(blk);
    const vec h = layer_norm64(x, W(b + ".norm0.weight"), W(b + ".norm0.bias"), L, d);
    const vec qkv = affine64(h, W(b + ".wqkv.weight"), W(b + ".wqkv.bias"), L, 3 * d, d);
    vec q(size_t(L * d)), k(size_t(L * d)), val(size_t(L * d));
    for (int64_t l = 0; l < L; ++l)
      for (int64_t i = 0; i < d; ++i) {
        q[size_t(l * d + i)] = qkv[size_t(l * 3 * d + i)];
        k[size_t(l * d + i)] = qkv[size_t(l * 3 * d + d + i)];
        val[size_t(l * d + i)] = qkv[size_t(l * 3 * d + 2 * d + i)];
      }
    vec o(size_t(L * d));
    int64_t at = 0;
    for (const auto& im : images) {
      for (int64_t l = 0; l < im.gh * im.gw; ++l) {
        rotate(q, at + l, l / im.gw, l % im.gw);
        rotate(k, at + l, l / im.gw, l % im.gw);
      }
      const int64_t n = im.gh * im.gw;
      for (int64_t hh = 0; hh < H; ++hh)
        for (int64_t i = at; i < at + n; ++i) {
          vec s(static_cast<size_t>(n));
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j < n; ++j) {
            double dot = 0;
            for (int64_t e = 0; e < D; ++e) dot += q[size_t(i * d + hh * D + e)] * k[size_t((at + j) * d + hh * D + e)];
            s[size_t(j)] = dot / std::sqrt(double(D));
            mx = std::max(mx, s[size_t(j)]);
          }
          for (auto& e : s) sum += e = std::exp(e - mx);
          for (int64_t e = 0; e < D; ++e) {
            double acc = 0;
            for (int64_t j = 0; j < n; ++j) acc += s[size_t(j)] / sum * val[size_t((at + j) * d + hh * D + e)];
            o[size_t(i * d + hh * D + e)] = acc;
          }
        }
      at += n;
    }
    const vec a = affine64(o, W(b + ".wo.weight"), W(b + ".wo.bias"), L, d, d);
    for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
    const vec h1 = layer_norm64(x, W(b + ".norm1.weight"), W(b + ".norm1.bias"), L, d);
    vec f = affine64(h1, W(b + ".mlp.fc0.weight"), W(b + ".mlp.fc0.bias"), L, I, d);
    for (auto& e : f) e = 0.5 * e * (1 + std::tanh(std::sqrt(2 / M_PI) * (e + 0.044715 * e * e * e)));
    const vec m = affine64(f, W(b + ".mlp.fc1.weight"), W(b + ".mlp.fc1.bias"), L, d, I);
    for (size_t i = 0; i < x.size(); ++i) x[i] += m[i];
  }
  x = layer_norm64(x, W(t + ".encoder.final_layernorm.weight"), W(t + ".encoder.final_layernorm.bias"), L, d);
  x = layer_norm64(x, W("multi_modal_projector.pre_norm.weight"), W("multi_modal_projector.pre_norm.bias"), L, d);
  vec merged;
  int64_t at = 0;
  for (const auto& im : images) {
    for (int64_t i = 0; i < im.gh / 2; ++i)
      for (int64_t j = 0; j < im.gw / 2; ++j)
        for (int64_t patch : {(2 * i) * im.gw + 2 * j, (2 * i) * im.gw + 2 * j + 1, (2 * i + 1) * im.gw + 2 * j,
                              (2 * i + 1) * im.gw + 2 * j + 1})
          merged.insert(merged.end(), x.begin() + (at + patch) * d, x.begin() + (at + patch + 1) * d);
    at += im.gh * im.gw;
  }
  const int64_t N = int64_t(merged.size()) / (4 * d);
  vec y = affine64(merged, W("multi_modal_projector.linear_1.weight"), W("multi_modal_projector.linear_1.bias"), N,
                   4 * d, 4 * d);
  for (auto& e : y) e = 0.5 * e * (1 + std::erf(e / std::sqrt(2.0)));
  return affine64(y, W("multi_modal_projector.linear_2.weight"), W("multi_modal_projector.linear_2.bias"), N,
                  c.hidden_size, 4 * d);
}

image64 random_image(int64_t gh, int64_t gw, uint64_t seed) {
  return moxi::testing::random_patch_image(gh, gw, seed);
}

std::vector<image_input> inputs_of(const std::vector<image64>& images) {
  return moxi::testing::image_inputs(images);
}

// Relative error of got against the fp64 reference: max |got - ref| / max |ref|.
double rel_err(const std::vector<float>& got, const vec& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    num = std::max(num, std::fabs(double(got[i]) - ref[i]));
    den = std::max(den, std::fabs(ref[i]));
  }
  return num / den;
}

TEST_F(vision_test, BicubicInterpolationMatchesTheTwoDimensionalKernelSum) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd(0, 1);
  for (auto [H, W, h, w] : {std::array<int64_t, 4>{8, 8, 8, 8}, {8, 8, 2, 4}, {8, 8, 12, 6}, {5, 7, 21, 3},
                            {64, 64, 32, 74}, {3, 3, 1, 1}}) {
    const int64_t C = 3;
    vec t(size_t(H * W * C));
    for (auto& e : t) e = nd(rng);
    const std::vector<float> tf(t.begin(), t.end());
    const vec tr(tf.begin(), tf.end());  // the reference sees the same rounded table
    const auto got = interpolate_bicubic(tf, H, W, C, h, w);
    // fp32 source coordinates and sums (as PyTorch computes them) against fp64: a few ulp of a coordinate.
    EXPECT_LT(rel_err(got, interpolate64(tr, H, W, C, h, w)), 2e-5) << H << "x" << W << " -> " << h << "x" << w;
    if (H == h && W == w) {  // at the table's own size the kernel picks the entries (t = 0: weights 0, 1, 0, 0)
      for (size_t i = 0; i < tf.size(); ++i) ASSERT_EQ(got[i], tf[i]);
    }
  }
}

TEST_F(vision_test, RopeRotatesColumnsOnEvenPairsAndRowsOnOddPairs) {
  const int64_t gh = 3, gw = 5, H = 2, D = 8;
  std::vector<float> freq = {1.0f, 0.1f};
  std::vector<float> x(size_t(gh * gw * H * D));
  std::mt19937_64 rng(5);
  std::normal_distribution<float> nd(0, 1);
  for (auto& e : x) e = nd(rng);
  auto y = x;
  rope_2d(y.data(), gh, gw, H, D, freq);
  for (int64_t l = 0; l < gh * gw; ++l)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < D / 2; ++j) {
        const double ang = double(j % 2 == 0 ? l % gw : l / gw) * double(freq[size_t(j / 2)]);
        const double a = x[size_t((l * H + h) * D + 2 * j)], b = x[size_t((l * H + h) * D + 2 * j + 1)];
        EXPECT_NEAR(y[size_t((l * H + h) * D + 2 * j)], a * std::cos(ang) - b * std::sin(ang), 1e-5);
        EXPECT_NEAR(y[size_t((l * H + h) * D + 2 * j + 1)], a * std::sin(ang) + b * std::cos(ang), 1e-5);
      }
}

TEST_F(vision_test, EncoderMatchesFp64ReferenceAtSeveralSizesAndPacked) {
  const auto c = config();
  const weights64 W(checkpoint());
  // 8 x 8 = the position table (no interpolation), smaller, larger and non-square grids, and two images packed.
  const std::vector<std::vector<image64>> cases = {
      {random_image(8, 8, 1)}, {random_image(2, 4, 2)}, {random_image(6, 10, 3)},
      {random_image(4, 2, 4), random_image(2, 6, 5)}};
  for (const bool fast : {false, true}) {
    std::optional<kernels::backend_scope> scope;
    if (!fast) scope.emplace(kernels::reference());
    const auto m = model::load(c, checkpoint());
    ASSERT_NE(m.vision(), nullptr);
    for (const auto& images : cases) {
      const auto got = m.vision()->encode(inputs_of(images));
      int64_t tokens = 0;
      for (const auto& im : images) tokens += m.vision()->tokens_of(im.gh, im.gw);
      ASSERT_EQ(int64_t(got.size()), tokens * c.hidden_size);
      const double err = rel_err(got, encode64(W, c, images));
      EXPECT_LT(err, 2e-5) << (fast ? kernels::active().name() : "ref") << ", " << images.size() << " image(s), first "
                           << images[0].gh << "x" << images[0].gw;
    }
  }
}

TEST_F(vision_test, PackingImagesChangesNothing) {
  const auto c = config();
  kernels::backend_scope ref(kernels::reference());  // row-count independent sums: bit-equal
  const auto m = model::load(c, checkpoint());
  const std::vector<image64> images = {random_image(4, 6, 7), random_image(2, 2, 8), random_image(6, 4, 9)};
  const auto packed = m.vision()->encode(inputs_of(images));
  std::vector<float> one_by_one;
  for (const auto& im : images) {
    const auto f = m.vision()->encode(inputs_of({im}));
    one_by_one.insert(one_by_one.end(), f.begin(), f.end());
  }
  EXPECT_EQ(packed, one_by_one);
}

TEST_F(vision_test, BadGridsAreRefusedByName) {
  const auto c = config();
  const auto m = model::load(c, checkpoint());
  auto im = random_image(3, 4, 1);  // 3 is not a multiple of the 2 x 2 merge
  try {
    m.vision()->encode(inputs_of({random_image(2, 2, 1), im}));
    FAIL();
  } catch (const error& e) {
    EXPECT_NE(std::string(e.what()).find("image 2: a grid of 3 x 4"), std::string::npos) << e.what();
  }
  auto short_pixels = random_image(2, 2, 1);
  short_pixels.pixels.pop_back();
  EXPECT_THROW(m.vision()->encode(inputs_of({short_pixels})), error);
  EXPECT_THROW(m.vision()->encode(inputs_of({random_image(512, 2, 1)})), error);
}

// Features placed at placeholder tokens act as those tokens' embeddings: when the features are the
// embedding rows of token X, the logits equal those of the prompt with X in the placeholders' places.
TEST_F(vision_test, FeaturesReplaceExactlyThePlaceholderTokens) {
  auto c = config();
  const token_id pad = 5, X = 17;
  c.media_placeholder_token_id = pad;
  kernels::backend_scope ref(kernels::reference());
  const auto m = model::load(c, checkpoint());
  const weights64 W(checkpoint());
  const vec embed = W("model.embed_tokens.weight");
  const int64_t d = c.hidden_size;
  const std::vector<token_id> with_pad = {1, 9, pad, pad, pad, 30, pad, 2};
  std::vector<token_id> with_x = with_pad;
  std::vector<float> media;
  for (auto& t : with_x)
    if (t == pad) {
      t = X;
      media.insert(media.end(), embed.begin() + X * d, embed.begin() + (X + 1) * d);
    }
  auto cache_a = m.new_cache(), cache_b = m.new_cache();
  forward_options oa;
  oa.media = media;
  const auto a = m.forward(with_pad, *cache_a, oa);
  const auto b = m.forward(with_x, *cache_b);
  EXPECT_EQ(a, b);
  // The batched forward does the same per item.
  auto cache_c = m.new_cache();
  batch_item item{with_pad, cache_c.get(), false, media};
  const auto batched = m.forward_batch(std::span(&item, 1));
  EXPECT_EQ(batched[0], b);
  // Fewer rows than placeholders: the later placeholders keep their own embedding (tokens the model wrote).
  auto cache_d = m.new_cache(), cache_e = m.new_cache();
  forward_options short_media;
  short_media.media = std::span(media).subspan(0, size_t(3 * d));
  std::vector<token_id> first_three = with_x;
  first_three[6] = pad;
  EXPECT_EQ(m.forward(with_pad, *cache_d, short_media), m.forward(first_three, *cache_e));
  // More rows than placeholders is an error.
  auto cache_f = m.new_cache();
  std::vector<float> extra = media;
  extra.insert(extra.end(), media.begin(), media.begin() + d);
  forward_options too_many;
  too_many.media = extra;
  EXPECT_THROW(m.forward(with_pad, *cache_f, too_many), error);
}

}  // namespace
}  // namespace moxi::model
