// Single layers of the engine against references written plainly here in fp64 from the checkpoint tensors:
// absorbed MLA == expanded multi-head attention (NoPE and interleaved RoPE with YaRN, q-LoRA or direct q,
// with and without the output gate); KDA == an fp64 token loop (both gate forms, both output gates);
// the MTP head's input composition; Gated DSA with a small top-k == masked dense attention over the
// top-k of a plainly computed lightning-indexer score; MoE == a per-token loop over all experts.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>

#include "moxi/base/mx.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/convert.h"
#include "moxi/formats/model-config.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/kernels/ref/moe.h"
#include "moxi/model/cache.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/layers/decoder.h"
#include "moxi/model/layers/ffn.h"
#include "moxi/model/layers/kda.h"
#include "moxi/model/layers/mla.h"
#include "moxi/model/model.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

using vec = std::vector<double>;

std::string config_path(const std::string& name) {
  return std::string(MOXI_SOURCE_DIR) + "/configs/" + name;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class scratch {
 public:
  static scratch& get() {
    static scratch s;
    return s;
  }
  const std::string& checkpoint(const std::string& name) {
    auto it = made_.find(name);
    if (it != made_.end()) return it->second;
    const std::string out = dir_ + "/" + name + ".ckpt";
    model::init_options o;
    o.seed = 3;
    o.show_progress = false;
    model::init_checkpoint(model::load_model_config(config_path(name)), out, o);
    return made_[name] = out;
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

 private:
  scratch() {
    std::string t = (fs::temp_directory_path() / "moxi-layers-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp");
    dir_ = t;
  }
  std::string dir_;
  std::map<std::string, std::string> made_;
};

// A checkpoint tensor widened to fp64, read without the engine's loader.
vec tensor(const formats::checkpoint& ck, const std::string& name) {
  const auto v = ck.view(name);
  std::vector<float> f(size_t(v.numel()));
  formats::to_f32(v.type, v.data, f.size(), f.data());
  return vec(f.begin(), f.end());
}

// y = W x for W [rows, cols] row-major.
vec matvec(const vec& W, const vec& x, size_t rows) {
  const size_t cols = x.size();
  vec y(rows, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t c = 0; c < cols; ++c) y[r] += W[r * cols + c] * x[c];
  return y;
}

vec rmsnorm(const vec& x, const vec& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

double sigmoid(double v) {
  return 1.0 / (1.0 + std::exp(-v));
}
double silu(double v) {
  return v * sigmoid(v);
}

std::vector<float> random_rows(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  return x;
}

double rel_max_err(const std::vector<float>& got, const vec& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::fabs(double(got[i]) - want[i]));
    den = std::max(den, std::fabs(want[i]));
  }
  return num / den;
}

// Rotates pairs of x[off .. off+R) by angle pos * inv_freq[i]: interleaved pairs (2i, 2i+1) or half-split
// pairs (i, i+R/2), with the YaRN attention factor on cos and sin.
void rotate(vec& x, size_t off, size_t R, double pos, const std::vector<double>& inv_freq, double af,
            bool interleaved) {
  for (size_t i = 0; i < R / 2; ++i) {
    const double a = pos * inv_freq[i], c = std::cos(a) * af, s = std::sin(a) * af;
    const size_t i0 = off + (interleaved ? 2 * i : i), i1 = off + (interleaved ? 2 * i + 1 : i + R / 2);
    const double x0 = x[i0], x1 = x[i1];
    x[i0] = x0 * c - x1 * s;
    x[i1] = x0 * s + x1 * c;
  }
}

struct mla_case {
  const char* config;
  int64_t layer;
  bool dense;        // drop the DSA fields: plain (gated) MLA
  int64_t topk = 0;  // with DSA: override index_topk
};

formats::model_config config_of(const mla_case& k) {
  auto doc = read_json(config_path(k.config));
  if (k.dense) {
    doc.erase("index_topk");
    doc.erase("index_n_heads");
    doc.erase("index_head_dim");
    if (doc["model_type"] == "deepseek_v32") doc["model_type"] = "deepseek_v3";
  } else if (k.topk) {
    doc["index_topk"] = k.topk;
  }
  return model::parse_model_config(doc, k.config);
}

// The expanded (MHA) reference: per head k = [W_UK c_kv ; k_pe], v = W_UV c_kv, softmax over the causal
// positions (or only over the DSA top-k of a plainly computed index score), then gate and o_proj.
std::vector<vec> expanded_reference(const formats::checkpoint& ck, const formats::model_config& c,
                                    const std::string& p, const std::vector<float>& xs, int64_t T) {
  const auto& m = *c.mla;
  const size_t H = size_t(m.num_heads), Dn = size_t(m.qk_nope_head_dim), Dr = size_t(m.qk_rope_head_dim),
               Dv = size_t(m.v_head_dim), L = size_t(m.kv_lora_rank), Dq = Dn + Dr, d = size_t(c.hidden_size);
  const double eps = c.rms_norm_eps;
  // RoPE tables from the (separately tested) inverse frequencies; the softmax mscale from its formula.
  std::vector<double> inv_freq(Dr / 2);
  double af = 1, mscale = 1;
  if (!m.use_nope) {
    kernels::ref::YarnConfig y;
    y.theta = c.rope.theta;
    y.factor = c.rope.yarn ? c.rope.factor : 1.0;
    y.original_max_position = double(c.rope.original_max_position_embeddings);
    y.beta_fast = c.rope.beta_fast;
    y.beta_slow = c.rope.beta_slow;
    y.mscale = c.rope.mscale;
    y.mscale_all_dim = c.rope.mscale_all_dim;
    kernels::ref::rope_inv_freq(y, int64_t(Dr), inv_freq.data());
    af = kernels::ref::yarn_attention_factor(y);
    if (c.rope.yarn && c.rope.factor > 1 && c.rope.mscale_all_dim > 0)
      mscale = 0.1 * c.rope.mscale_all_dim * std::log(c.rope.factor) + 1.0;
  }
  const double scale = mscale * mscale / std::sqrt(double(Dq));

  const vec kv_a = tensor(ck, p + ".kv_a_proj_with_mqa.weight"),
            kv_norm = tensor(ck, p + ".kv_a_layernorm.weight"), kv_b = tensor(ck, p + ".kv_b_proj.weight"),
            o_proj = tensor(ck, p + ".o_proj.weight");
  vec q_a, q_norm, q_b, q_proj, g_proj;
  if (m.q_lora_rank) {
    q_a = tensor(ck, p + ".q_a_proj.weight");
    q_norm = tensor(ck, p + ".q_a_layernorm.weight");
    q_b = tensor(ck, p + ".q_b_proj.weight");
  } else {
    q_proj = tensor(ck, p + ".q_proj.weight");
  }
  if (m.output_gate) g_proj = tensor(ck, p + ".g_proj.weight");

  std::vector<vec> q(static_cast<size_t>(T)), cq(static_cast<size_t>(T)), k(static_cast<size_t>(T)),
      v(static_cast<size_t>(T));  // per token, heads concatenated
  for (int64_t t = 0; t < T; ++t) {
    const vec x(xs.begin() + t * int64_t(d), xs.begin() + (t + 1) * int64_t(d));
    if (m.q_lora_rank) {
      cq[size_t(t)] = rmsnorm(matvec(q_a, x, size_t(*m.q_lora_rank)), q_norm, eps);
      q[size_t(t)] = matvec(q_b, cq[size_t(t)], H * Dq);
    } else {
      q[size_t(t)] = matvec(q_proj, x, H * Dq);
    }
    const vec kv = matvec(kv_a, x, L + Dr);
    const vec ckv = rmsnorm(vec(kv.begin(), kv.begin() + long(L)), kv_norm, eps);
    vec kpe(kv.begin() + long(L), kv.end());
    if (!m.use_nope) {
      rotate(kpe, 0, Dr, double(t), inv_freq, af, true);
      for (size_t h = 0; h < H; ++h) rotate(q[size_t(t)], h * Dq + Dn, Dr, double(t), inv_freq, af, true);
    }
    k[size_t(t)].assign(H * Dq, 0.0);
    v[size_t(t)].assign(H * Dv, 0.0);
    for (size_t h = 0; h < H; ++h) {
      for (size_t i = 0; i < Dn; ++i)
        for (size_t j = 0; j < L; ++j) k[size_t(t)][h * Dq + i] += kv_b[(h * (Dn + Dv) + i) * L + j] * ckv[j];
      for (size_t i = 0; i < Dr; ++i) k[size_t(t)][h * Dq + Dn + i] = kpe[i];
      for (size_t i = 0; i < Dv; ++i)
        for (size_t j = 0; j < L; ++j)
          v[size_t(t)][h * Dv + i] += kv_b[(h * (Dn + Dv) + Dn + i) * L + j] * ckv[j];
    }
  }

  // Which keys each query may attend to: all causal ones, or the DSA top-k by index score.
  std::vector<std::vector<size_t>> allowed(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t s = 0; s <= t; ++s) allowed[size_t(t)].push_back(size_t(s));
  if (c.dsa) {
    const size_t HI = size_t(c.dsa->index_n_heads), DI = size_t(c.dsa->index_head_dim);
    const vec wq_b = tensor(ck, p + ".indexer.wq_b.weight"), wk = tensor(ck, p + ".indexer.wk.weight"),
              kn_w = tensor(ck, p + ".indexer.k_norm.weight"), kn_b = tensor(ck, p + ".indexer.k_norm.bias"),
              wp = tensor(ck, p + ".indexer.weights_proj.weight");
    std::vector<vec> qi(static_cast<size_t>(T)), ki(static_cast<size_t>(T)), wi(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const vec x(xs.begin() + t * int64_t(d), xs.begin() + (t + 1) * int64_t(d));
      qi[size_t(t)] = matvec(wq_b, cq[size_t(t)], HI * DI);
      vec kr = matvec(wk, x, DI);
      double mean = 0, var = 0;
      for (double e : kr) mean += e / double(DI);
      for (double e : kr) var += (e - mean) * (e - mean) / double(DI);
      for (size_t i = 0; i < DI; ++i) kr[i] = (kr[i] - mean) / std::sqrt(var + 1e-6) * kn_w[i] + kn_b[i];
      ki[size_t(t)] = kr;
      if (!m.use_nope) {  // NeoX half-split rotation of the FIRST Dr dims
        rotate(ki[size_t(t)], 0, Dr, double(t), inv_freq, af, false);
        for (size_t j = 0; j < HI; ++j) rotate(qi[size_t(t)], j * DI, Dr, double(t), inv_freq, af, false);
      }
      // Keys are cached in FP8 with a power-of-two scale (the codec mx-test checks against fp64).
      std::vector<float> kf(ki[size_t(t)].begin(), ki[size_t(t)].end());
      moxi::mx::fake_quantize_fp8_row(kf.data(), DI, kf.data());
      ki[size_t(t)].assign(kf.begin(), kf.end());
      wi[size_t(t)] = matvec(wp, x, HI);
      for (double& e : wi[size_t(t)]) e /= std::sqrt(double(HI)) * std::sqrt(double(DI));
    }
    const size_t topk = size_t(c.dsa->index_topk);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<std::pair<double, size_t>> sc;
      for (size_t s = 0; s <= size_t(t); ++s) {
        double I = 0;
        for (size_t j = 0; j < HI; ++j) {
          double dot = 0;
          for (size_t i = 0; i < DI; ++i) dot += qi[size_t(t)][j * DI + i] * ki[s][i];
          I += wi[size_t(t)][j] * std::max(dot, 0.0);
        }
        sc.push_back({-I, s});  // ascending sort: higher score first, lower position on ties
      }
      std::sort(sc.begin(), sc.end());
      allowed[size_t(t)].clear();
      for (size_t i = 0; i < std::min(topk, sc.size()); ++i) allowed[size_t(t)].push_back(sc[i].second);
    }
  }

  std::vector<vec> out(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const vec x(xs.begin() + t * int64_t(d), xs.begin() + (t + 1) * int64_t(d));
    vec o(H * Dv, 0.0);
    for (size_t h = 0; h < H; ++h) {
      std::vector<double> sc;
      for (size_t s : allowed[size_t(t)]) {
        double dot = 0;
        for (size_t i = 0; i < Dq; ++i) dot += q[size_t(t)][h * Dq + i] * k[s][h * Dq + i];
        sc.push_back(dot * scale);
      }
      const double mx = *std::max_element(sc.begin(), sc.end());
      double z = 0;
      for (double& e : sc) z += (e = std::exp(e - mx));
      for (size_t a = 0; a < sc.size(); ++a)
        for (size_t i = 0; i < Dv; ++i) o[h * Dv + i] += sc[a] / z * v[allowed[size_t(t)][a]][h * Dv + i];
    }
    if (m.output_gate) {
      const vec g = matvec(g_proj, x, H * Dv);
      for (size_t i = 0; i < H * Dv; ++i) o[i] *= sigmoid(g[i]);
    }
    out[size_t(t)] = matvec(o_proj, o, d);
  }
  return out;
}

void check_mla(const mla_case& k) {
  SCOPED_TRACE(std::string(k.config) + " layer " + std::to_string(k.layer));
  const auto c = config_of(k);
  const auto ck = formats::checkpoint::open(scratch::get().checkpoint(k.config));
  model::weight_loader ld(ck, c, {});
  const std::string p = "model.layers." + std::to_string(k.layer) + ".self_attn";
  const auto w = model::load_mla(ld, p);
  const int64_t T = 40, d = c.hidden_size;
  const auto x = random_rows(T * d, 9);
  // Engine: three calls through one cache (prefill, a decode step, the rest).
  model::contiguous_cache cache(c);
  std::vector<float> got(size_t(T * d));
  int64_t t0 = 0;
  for (int64_t n : {25, 1, 14}) {
    model::mla_forward(w, c, x.data() + t0 * d, n, cache, k.layer, got.data() + t0 * d, nullptr, "mla");
    t0 += n;
  }
  const auto want = expanded_reference(ck, c, p, x, T);
  vec flat;
  for (const auto& r : want) flat.insert(flat.end(), r.begin(), r.end());
  EXPECT_LT(rel_max_err(got, flat), 2e-5);
}

TEST(Layers, AbsorbedMlaEqualsExpandedMha) {
  check_mla({"tiny-kimi-linear.json", 3, false});   // NoPE, direct q_proj, no gate
  check_mla({"tiny-seed.json", 3, true});           // NoPE, q-LoRA, output gate
  check_mla({"tiny-deepseek-v3.2.json", 1, true});  // interleaved RoPE with YaRN (factor 4)
}

// YaRN from config.json to the layer, against the formulas of HF transformers' DeepseekV3 YaRN rotary
// embedding and attention scaling written here in fp64 (docs/deepseek.md §B.5-B.6):
//   inv_freq_i = b_i (1 - m_i) / factor + b_i m_i ... with b_i = theta^(-2i/R), m_i = 1 - ramp_i,
//   ramp_i = clamp((i - low) / (high - low), 0, 1), low/high = floor/ceil of R ln(orig / (2 pi beta)) /
//   (2 ln theta) for beta_fast/beta_slow, clamped to [0, R-1];
//   cos/sin times get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim);
//   softmax scale (Dn+Dr)^-0.5 * get_mscale(factor, mscale_all_dim)^2, get_mscale(f, m) = 0.1 m ln f + 1.
struct yarn_fp64 {
  std::vector<double> inv_freq;
  double cos_factor, softmax_scale;
};
yarn_fp64 yarn_formula(const nlohmann::json& rs, double theta, int64_t R, int64_t qk_head_dim) {
  const double f = rs["factor"], orig = rs["original_max_position_embeddings"], bf = rs["beta_fast"],
               bs = rs["beta_slow"], ms = rs.value("mscale", 1.0), msa = rs.value("mscale_all_dim", 0.0);
  auto corr = [&](double rot) { return double(R) * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(theta)); };
  const double low = std::max(std::floor(corr(bf)), 0.0);
  double high = std::min(std::ceil(corr(bs)), double(R - 1));
  if (high == low) high += 0.001;
  yarn_fp64 y;
  for (int64_t i = 0; i < R / 2; ++i) {
    const double b = std::pow(theta, -double(2 * i) / double(R));
    const double ramp = std::min(std::max((double(i) - low) / (high - low), 0.0), 1.0);
    y.inv_freq.push_back(b / f * ramp + b * (1 - ramp));
  }
  auto get_mscale = [&](double m) { return f <= 1 ? 1.0 : 0.1 * m * std::log(f) + 1.0; };
  y.cos_factor = get_mscale(ms) / get_mscale(msa);
  y.softmax_scale = std::pow(double(qk_head_dim), -0.5) * get_mscale(msa) * get_mscale(msa);
  return y;
}

TEST(Layers, YarnFromTheConfigMatchesFp64FormulasFarPastTheOriginalContext) {
  const auto ck = formats::checkpoint::open(scratch::get().checkpoint("tiny-deepseek-v3.2.json"));
  const nlohmann::json variants[] = {
      // DeepSeek-V3 / V3.2's published block.
      {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096}, {"beta_fast", 32},
       {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}},
      // DeepSeek-V2-Lite style: equal mscales leave cos/sin unscaled.
      {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096}, {"beta_fast", 32},
       {"beta_slow", 1}, {"mscale", 0.707}, {"mscale_all_dim", 0.707}},
      // mscale only: cos/sin scaled, softmax not.
      {{"type", "yarn"}, {"factor", 8}, {"original_max_position_embeddings", 256}, {"beta_fast", 32},
       {"beta_slow", 1}, {"mscale", 1.0}},
      // The tiny config's own: the ramp inside its 4 rope pairs.
      {{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 256}, {"beta_fast", 32},
       {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}},
  };
  for (const auto& rs : variants) {
    SCOPED_TRACE(rs.dump());
    auto doc = read_json(config_path("tiny-deepseek-v3.2.json"));
    doc["rope_scaling"] = rs;
    doc["max_position_embeddings"] = 1 << 20;
    const auto c = model::parse_model_config(doc, "yarn-variant");
    ASSERT_TRUE(c.rope.yarn);
    model::weight_loader ld(ck, c, {});
    const auto w = model::load_mla(ld, "model.layers.1.self_attn");
    const int64_t R = c.mla->qk_rope_head_dim;
    const auto want = yarn_formula(rs, c.rope.theta, R, c.mla->qk_head_dim());
    ASSERT_EQ(w.inv_freq.size(), want.inv_freq.size());
    for (size_t i = 0; i < want.inv_freq.size(); ++i)
      EXPECT_NEAR(w.inv_freq[i], want.inv_freq[i], 1e-15 * want.inv_freq[i]) << "pair " << i;
    EXPECT_NEAR(w.rope_attention_factor, want.cos_factor, 1e-14);
    EXPECT_NEAR(w.softmax_scale, want.softmax_scale, 1e-7 * want.softmax_scale);  // (stored as float)
    // The tables the layer rotates by, at positions up to 1M (256x the original context): fp64 angles.
    const std::vector<int64_t> pos = {0, 1, 255, 256, 4095, 4096, 100000, 163839, 524287, 1048575};
    const int64_t n = int64_t(pos.size());
    std::vector<float> cs(size_t(n * R / 2)), sn(cs.size());
    kernels::active().rope_cos_sin(pos.data(), w.inv_freq.data(), w.rope_attention_factor, cs.data(), sn.data(),
                                   n, R);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < R / 2; ++i) {
        const double a = double(pos[size_t(t)]) * want.inv_freq[size_t(i)];
        EXPECT_NEAR(cs[size_t(t * R / 2 + i)], std::cos(a) * want.cos_factor, 2e-7) << pos[size_t(t)] << " " << i;
        EXPECT_NEAR(sn[size_t(t * R / 2 + i)], std::sin(a) * want.cos_factor, 2e-7) << pos[size_t(t)] << " " << i;
      }
  }
  // The layer rotates by these tables: Layers.AbsorbedMlaEqualsExpandedMha checks the whole layer with
  // the tiny config's YaRN (factor 4) against the expanded fp64 reference. RoPE is relative, so where a
  // prompt starts changes the layer's output only through these tables' precision, checked above.
}

TEST(Layers, DsaWithSmallTopkEqualsMaskedDenseReference) {
  check_mla({"tiny-seed.json", 5, false});              // NoPE indexer, k = 8 of up to 40
  check_mla({"tiny-deepseek-v3.2.json", 0, false});     // half-split indexer RoPE, k = 8
  check_mla({"tiny-deepseek-v3.2.json", 2, false, 3});  // k = 3
}

// MoE: route each token (ref::moe_route, tested against brute force in kernels/), then loop over ALL
// experts with weight 0 for the unselected ones, experts dequantized here from the MXFP4 bytes, MXFP8
// activation fake-quant where the config asks for it, latent projection + norm, shared experts unscaled.
void check_moe(const char* config, int64_t layer, const std::string& moe_prefix, const std::string& g,
               const std::string& u, const std::string& dn, int64_t T = 37) {
  SCOPED_TRACE(std::string(config) + " T=" + std::to_string(T));
  const auto c = model::load_model_config(config_path(config));
  const auto ck = formats::checkpoint::open(scratch::get().checkpoint(config));
  model::weight_loader ld(ck, c, {});
  const std::string p = "model.layers." + std::to_string(layer) + "." + moe_prefix;
  const auto w = model::load_moe(ld, p, {moe_prefix, g, u, dn});
  const int64_t d = c.hidden_size, E = c.moe.num_experts, K = c.moe.experts_per_token;
  const size_t W = size_t(c.moe.expert_width(d)), F = size_t(c.moe.intermediate_size);
  const auto x = random_rows(T * d, 17);
  std::vector<float> got(size_t(T * d));
  model::moe_forward(w, c, x.data(), T, got.data(), nullptr, "moe");

  const bool mx4 = c.quant && c.quant->method == formats::quant_method::MXFP4;
  const bool aq = mx4 && c.quant->activations == formats::act_format::MXFP8_E4M3;
  auto expert = [&](const std::string& name, size_t N, size_t Kd) {
    if (!mx4) return tensor(ck, name);
    const auto b = ck.view(name + "_blocks"), s = ck.view(name + "_scales");
    std::vector<float> f(N * Kd);
    for (size_t n = 0; n < N; ++n)
      mx::dequantize_mxfp4(reinterpret_cast<const uint8_t*>(b.data) + n * Kd / 2,
                           reinterpret_cast<const uint8_t*>(s.data) + n * Kd / 32, Kd, f.data() + n * Kd);
    return vec(f.begin(), f.end());
  };
  auto quant = [&](vec v) {
    if (!aq) return v;
    std::vector<float> f(v.begin(), v.end());
    mx::fake_quantize(mx::elem_format::FP8_E4M3, f.data(), f.size(), f.data());
    return vec(f.begin(), f.end());
  };
  const vec router = tensor(ck, p + ".gate.weight");
  const vec bias = tensor(ck, p + ".gate.e_score_correction_bias");
  std::vector<float> fbias(bias.begin(), bias.end());
  kernels::ref::RouterConfig rc;
  rc.n_experts = E;
  rc.top_k = K;
  rc.n_group = c.moe.num_groups;
  rc.topk_group = c.moe.topk_group;
  rc.renormalize = c.moe.renormalize && K > 1;
  rc.routed_scaling_factor = float(c.moe.routed_scaling_factor);
  vec lat_down, lat_norm, lat_up;
  if (c.moe.latent_size) {
    lat_down = tensor(ck, p + ".latent_down_proj.weight");
    lat_up = tensor(ck, p + ".latent_up_proj.weight");
    if (c.moe.latent_norm) lat_norm = tensor(ck, p + ".latent_norm.weight");
  }
  std::vector<vec> w1(static_cast<size_t>(E)), w3(static_cast<size_t>(E)), w2(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const std::string q = p + ".experts." + std::to_string(e) + ".";
    w1[size_t(e)] = expert(q + g + ".weight", F, W);
    w3[size_t(e)] = expert(q + u + ".weight", F, W);
    w2[size_t(e)] = expert(q + dn + ".weight", W, F);
  }
  const size_t FS = F * size_t(c.moe.num_shared_experts);
  const vec sg = tensor(ck, p + ".shared_experts.gate_proj.weight"),
            su = tensor(ck, p + ".shared_experts.up_proj.weight"),
            sd = tensor(ck, p + ".shared_experts.down_proj.weight");

  vec want;
  for (int64_t t = 0; t < T; ++t) {
    const vec xt(x.begin() + t * d, x.begin() + (t + 1) * d);
    const vec lg = matvec(router, xt, size_t(E));
    std::vector<float> flg(lg.begin(), lg.end());
    std::vector<int32_t> sel(static_cast<size_t>(K));
    std::vector<float> sw(static_cast<size_t>(K));
    kernels::ref::moe_route(flg.data(), fbias.data(), rc, sel.data(), sw.data(), 1);
    vec gate_w(size_t(E), 0.0);
    for (int64_t j = 0; j < K; ++j) gate_w[size_t(sel[size_t(j)])] = sw[size_t(j)];
    vec xe = xt;
    if (c.moe.latent_size) {
      xe = matvec(lat_down, xt, W);
      if (c.moe.latent_norm) xe = rmsnorm(xe, lat_norm, c.rms_norm_eps);
    }
    const vec xq = quant(xe);
    vec acc(W, 0.0);
    for (int64_t e = 0; e < E; ++e) {
      const vec a = matvec(w1[size_t(e)], xq, F), b = matvec(w3[size_t(e)], xq, F);
      vec h(F);
      for (size_t i = 0; i < F; ++i) h[i] = silu(a[i]) * b[i];
      const vec y = matvec(w2[size_t(e)], quant(h), W);
      for (size_t i = 0; i < W; ++i) acc[i] += gate_w[size_t(e)] * y[i];
    }
    vec out = c.moe.latent_size ? matvec(lat_up, acc, size_t(d)) : acc;
    const vec a = matvec(sg, xt, FS), b = matvec(su, xt, FS);
    vec h(FS);
    for (size_t i = 0; i < FS; ++i) h[i] = silu(a[i]) * b[i];
    const vec s = matvec(sd, h, size_t(d));
    for (size_t i = 0; i < size_t(d); ++i) want.push_back(out[i] + s[i]);
  }
  // Observed 3e-7..5e-7. With MXFP8 inputs the fp32 engine and this fp64 loop could put an element on
  // different sides of a rounding boundary, hence the looser bound there; a wrong weight, order or scale
  // is off by orders of magnitude more.
  EXPECT_LT(rel_max_err(got, want), aq ? 1e-4 : 2e-5);
}

TEST(Layers, MoeEqualsPerTokenDenseLoop) {
  // Latent, MXFP4 + MXFP8; decode sizes too: T <= 4 takes the MXFP4 GEMV, and the fused expert job splits
  // a handful of experts.
  for (const int64_t T : {1, 3, 37}) check_moe("tiny-seed.json", 1, "block_sparse_moe", "w1", "w3", "w2", T);
  check_moe("tiny-kimi-linear.json", 2, "block_sparse_moe", "w1", "w3", "w2");          // scaling 2.446
  check_moe("tiny-deepseek-v3.2.json", 1, "mlp", "gate_proj", "up_proj", "down_proj");  // 4 groups, keep 2
}

// KDA: conv over the raw projections (zero history), SiLU, L2 norm, gate, beta, the delta-rule recurrence
// token by token in fp64, gated per-head RMSNorm, o_proj. The engine runs the same 80 tokens as a chunked
// prefill of 70 (> one 64-token chunk), one recurrent decode step and a chunk of 9.
void check_kda(const char* config, int64_t layer) {
  SCOPED_TRACE(config);
  const auto c = model::load_model_config(config_path(config));
  const auto ck = formats::checkpoint::open(scratch::get().checkpoint(config));
  model::weight_loader ld(ck, c, {});
  const std::string p = "model.layers." + std::to_string(layer) + ".self_attn";
  const auto w = model::load_kda(ld, p);
  const auto& kc = *c.kda;
  const int64_t T = 80, d = c.hidden_size;
  const size_t H = size_t(kc.num_heads), D = size_t(kc.head_dim), P = H * D, W = size_t(kc.conv_kernel);
  const auto x = random_rows(T * d, 23);
  model::contiguous_cache cache(c);
  std::vector<float> got(size_t(T * d));
  int64_t t0 = 0;
  for (int64_t n : {70, 1, 9}) {
    model::kda_forward(w, c, x.data() + t0 * d, n, cache.kda(layer), got.data() + t0 * d, nullptr, "kda");
    t0 += n;
  }

  const vec qp = tensor(ck, p + ".q_proj.weight"), kp = tensor(ck, p + ".k_proj.weight"),
            vp = tensor(ck, p + ".v_proj.weight"), qcv = tensor(ck, p + ".q_conv1d.weight"),
            kcv = tensor(ck, p + ".k_conv1d.weight"), vcv = tensor(ck, p + ".v_conv1d.weight"),
            fa = tensor(ck, p + ".f_a_proj.weight"), fb = tensor(ck, p + ".f_b_proj.weight"),
            bp = tensor(ck, p + ".b_proj.weight"), A_log = tensor(ck, p + ".A_log"),
            dt = tensor(ck, p + ".dt_bias"), on = tensor(ck, p + ".o_norm.weight"),
            op = tensor(ck, p + ".o_proj.weight");
  vec gp, ga, gb;
  if (kc.full_rank_output_gate) {
    gp = tensor(ck, p + ".g_proj.weight");
  } else {
    ga = tensor(ck, p + ".g_a_proj.weight");
    gb = tensor(ck, p + ".g_b_proj.weight");
  }
  std::vector<vec> rq, rk, rv;  // raw projections per token (the conv's inputs)
  std::vector<vec> S(H, vec(D * D, 0.0));
  const double scale = 1.0 / std::sqrt(double(D));
  vec want;
  for (int64_t t = 0; t < T; ++t) {
    const vec xt(x.begin() + t * d, x.begin() + (t + 1) * d);
    rq.push_back(matvec(qp, xt, P));
    rk.push_back(matvec(kp, xt, P));
    rv.push_back(matvec(vp, xt, P));
    auto conv = [&](const std::vector<vec>& hist, const vec& cw) {
      vec y(P, 0.0);
      for (size_t ch = 0; ch < P; ++ch) {
        for (size_t j = 0; j < W; ++j) {
          const int64_t s = t - int64_t(W) + 1 + int64_t(j);
          if (s >= 0) y[ch] += cw[ch * W + j] * hist[size_t(s)][ch];
        }
        y[ch] = silu(y[ch]);
      }
      return y;
    };
    vec q = conv(rq, qcv), k = conv(rk, kcv), v = conv(rv, vcv);
    for (size_t h = 0; h < H; ++h)
      for (vec* a : {&q, &k}) {
        double ss = 0;
        for (size_t i = 0; i < D; ++i) ss += (*a)[h * D + i] * (*a)[h * D + i];
        for (size_t i = 0; i < D; ++i) (*a)[h * D + i] /= std::sqrt(ss + 1e-6);
      }
    const vec graw = matvec(fb, matvec(fa, xt, D), P);
    const vec bl = matvec(bp, xt, H);
    const vec gate = kc.full_rank_output_gate ? matvec(gp, xt, P) : matvec(gb, matvec(ga, xt, D), P);
    vec o(P);
    for (size_t h = 0; h < H; ++h) {
      const double beta = sigmoid(bl[h]);
      for (size_t i = 0; i < D; ++i) {
        const double z = graw[h * D + i] + dt[h * D + i];
        const double g = kc.gate == formats::kda_gate_kind::LOWER_BOUND
                             ? kc.gate_lower_bound * sigmoid(std::exp(A_log[h]) * z)
                             : -std::exp(A_log[h]) * (z > 20 ? z : std::log1p(std::exp(z)));
        for (size_t j = 0; j < D; ++j) S[h][i * D + j] *= std::exp(g);
      }
      for (size_t j = 0; j < D; ++j) {
        double pred = 0;
        for (size_t i = 0; i < D; ++i) pred += k[h * D + i] * S[h][i * D + j];
        const double delta = beta * (v[h * D + j] - pred);
        for (size_t i = 0; i < D; ++i) S[h][i * D + j] += k[h * D + i] * delta;
      }
      double ms = 0;
      for (size_t j = 0; j < D; ++j) {
        double acc = 0;
        for (size_t i = 0; i < D; ++i) acc += S[h][i * D + j] * q[h * D + i] * scale;
        o[h * D + j] = acc;
        ms += acc * acc / double(D);
      }
      for (size_t j = 0; j < D; ++j)
        o[h * D + j] = o[h * D + j] / std::sqrt(ms + c.rms_norm_eps) * on[j] * sigmoid(gate[h * D + j]);
    }
    const vec out = matvec(op, o, size_t(d));
    want.insert(want.end(), out.begin(), out.end());
  }
  EXPECT_LT(rel_max_err(got, want), 2e-5);
}

TEST(Layers, KdaEqualsFp64TokenLoop) {
  check_kda("tiny-seed.json", 0);         // lower-bound gate (-5), full-rank output gate
  check_kda("tiny-kimi-linear.json", 1);  // softplus gate, low-rank output gate
}

// MTP input composition, independently of the engine's MTP code: x = eh_proj([enorm(emb(t+1)) ;
// hnorm(h)]) in fp64 from the checkpoint, the block through decoder_layer_forward (tested above and in
// forward-test), then shared_head.norm and lm_head in fp64.
TEST(Layers, MtpHeadComposesEmbeddingFirst) {
  const char* config = "tiny-seed.json";
  const auto c = model::load_model_config(config_path(config));
  const std::string dir = scratch::get().checkpoint(config);
  const auto ck = formats::checkpoint::open(dir);
  const auto m = model::model::load(dir);
  const int64_t T = 12, d = c.hidden_size, V = c.vocab_size;
  std::vector<token_id> toks;
  for (int64_t i = 0; i <= T; ++i) toks.push_back(token_id((i * 37 + 5) % V));
  std::vector<float> hidden;
  model::forward_options fo;
  fo.hidden = &hidden;
  auto cache = m.new_cache();
  m.forward(std::span(toks).first(size_t(T)), *cache, fo);
  const auto got = m.mtp_forward(hidden, std::span(toks).subspan(1, size_t(T)), *cache);

  const std::string p = "model.layers." + std::to_string(c.num_layers);
  const vec emb = tensor(ck, "model.embed_tokens.weight"), en = tensor(ck, p + ".enorm.weight"),
            hn = tensor(ck, p + ".hnorm.weight"), eh = tensor(ck, p + ".eh_proj.weight"),
            sn = tensor(ck, p + ".shared_head.norm.weight"), head = tensor(ck, "lm_head.weight");
  std::vector<float> x(size_t(T * d));
  for (int64_t t = 0; t < T; ++t) {
    const size_t tok = size_t(toks[size_t(t + 1)]);
    const vec e =
        rmsnorm(vec(emb.begin() + long(tok) * d, emb.begin() + long(tok + 1) * d), en, c.rms_norm_eps);
    const vec h = rmsnorm(vec(hidden.begin() + t * d, hidden.begin() + (t + 1) * d), hn, c.rms_norm_eps);
    vec cat = e;
    cat.insert(cat.end(), h.begin(), h.end());
    const vec y = matvec(eh, cat, size_t(d));
    std::copy(y.begin(), y.end(), x.begin() + t * d);
  }
  model::weight_loader ld(ck, c, {});
  const auto layout = model::arch::find_architecture(c).layout(c);
  const auto block = model::load_decoder_layer(ld, layout.mtp_layers[0], layout.ffn, c.num_layers);
  model::contiguous_cache fresh(c);
  model::decoder_layer_forward(block, c, x.data(), T, fresh, nullptr, "mtp");
  vec want;
  for (int64_t t = 0; t < T; ++t) {
    const vec hn2 = rmsnorm(vec(x.begin() + t * d, x.begin() + (t + 1) * d), sn, c.rms_norm_eps);
    const vec l = matvec(head, hn2, size_t(V));
    want.insert(want.end(), l.begin(), l.end());
  }
  EXPECT_LT(rel_max_err(got, want), 2e-5);
}

// DeepSeek FP8 checkpoints: an F8_E4M3 weight times its F32 weight_scale_inv, one per [128, 128] block
// (ragged at the edges), decoded once at load.
TEST(Layers, Fp8BlockWeightsAreScaledPerBlock) {
  auto doc = read_json(config_path("tiny-deepseek-v3.2.json"));
  doc["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"weight_block_size", {128, 128}},
                                {"activation_scheme", "dynamic"}};
  const auto c = model::parse_model_config(doc, "fp8");
  const int64_t R = 130, C = 200;
  std::vector<uint8_t> w(size_t(R * C));
  for (size_t i = 0; i < w.size(); ++i) w[i] = uint8_t((i * 7) % 0x7E);  // finite E4M3 codes only
  const std::vector<float> scale = {0.5f, 2.0f, 4.0f, 0.25f};            // [ceil(130/128), ceil(200/128)]
  std::string t = (fs::temp_directory_path() / "moxi-fp8-XXXXXX").string();
  ASSERT_TRUE(::mkdtemp(t.data()));
  formats::write_safetensors(t + "/w.safetensors",
                             {{{"x.weight", dtype::F8_E4M3, {R, C}}, w.data()},
                              {{"x.weight_scale_inv", dtype::F32, {2, 2}}, scale.data()}});
  const auto ck = formats::checkpoint::open(t + "/w.safetensors");
  model::weight_loader ld(ck, c, {});
  const auto got = ld.f32("x.weight", {R, C});
  for (int64_t r = 0; r < R; ++r)
    for (int64_t col = 0; col < C; ++col)
      ASSERT_EQ(got[size_t(r * C + col)],
                mx::fp8_e4m3_to_f32(w[size_t(r * C + col)]) * scale[size_t((r / 128) * 2 + col / 128)])
          << r << "," << col;
  std::error_code ec;
  fs::remove_all(t, ec);
}

}  // namespace
