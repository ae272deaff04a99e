// Golden cross-check of the trainer against the engine: on random tiny checkpoints of several
// configs (both KDA gate forms, DSA on and off, latent MoE on and off, MXFP4 on and off, MTP on), the
// trainer's libtorch logits equal the engine's reference forward within 1e-4 max abs in fp32, MXFP4 experts
// decode bit-identically, and a checkpoint the trainer saves is served by the engine unchanged. A mismatch
// names the first intermediate (and so the layer and tensor) where the two part.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <span>
#include <sstream>

#include "moxi/formats/checkpoint.h"
#include "moxi/formats/model-config.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/layers/weights.h"
#include "moxi/model/model.h"
#include "moxi/train/fake-quant.h"
#include "moxi/train/model.h"

namespace fs = std::filesystem;
using namespace moxi;

namespace {

constexpr double kLogitsTol = 1e-4;  // max abs, fp32 (the bound)
constexpr double kDumpTol = 1e-4;    // max abs relative to max(1, max |engine|), to locate a mismatch
constexpr int64_t kTokens = 24;      // > index_topk 8 of the tiny configs: DSA is sparse past position 8

struct variant {
  std::string name, base;  // base: configs/<base>
  std::function<void(nlohmann::json&)> edit;
};

void no_quant(nlohmann::json& j) {
  j.erase("quantization_config");
}
void no_dsa(nlohmann::json& j) {
  for (const char* f : {"index_n_heads", "index_head_dim", "index_topk"}) j.erase(f);
}

// gtest prints a failing parameter with this instead of its bytes.
void PrintTo(const variant& v, std::ostream* os) {
  *os << v.name;
}

const std::vector<variant>& variants() {
  static const std::vector<variant> v = {
      // Lower-bound gate, full-rank output gate, Gated DSA, latent MoE with norm, MXFP4 + MXFP8, MTP.
      {"seed", "tiny-seed.json", [](nlohmann::json&) {}},
      // Softplus gate, low-rank output gate, dense gated MLA, experts in the hidden width, f32 experts.
      {"seed-softplus-mla-nolatent-f32", "tiny-seed.json",
       [](nlohmann::json& j) {
         j["linear_attn_config"].erase("gate_lower_bound");
         j["linear_attn_config"]["use_full_rank_gate"] = false;
         no_dsa(j);
         j.erase("routed_expert_hidden_size");
         j.erase("latent_moe_use_norm");
         no_quant(j);
       }},
      // Latent MoE without its norm, a smaller top-k, MXFP4 with MXFP8 inputs.
      {"seed-latent-nonorm-topk4", "tiny-seed.json",
       [](nlohmann::json& j) {
         j["latent_moe_use_norm"] = false;
         j["index_topk"] = 4;
       }},
      // Kimi-Linear: softplus gate, low-rank gate, direct q_proj, dense MLA, no MTP.
      {"kimi-linear", "tiny-kimi-linear.json", [](nlohmann::json&) {}},
      // Kimi-Linear with an MTP layer and MXFP4 experts (MXFP8 activations).
      {"kimi-linear-mtp-mxfp4", "tiny-kimi-linear.json",
       [](nlohmann::json& j) {
         j["num_nextn_predict_layers"] = 1;
         j["quantization_config"] = {{"quant_method", "mxfp4"},
                                     {"block_size", 32},
                                     {"activation_format", "mxfp8_e4m3"},
                                     {"quantized_modules", "routed_experts"}};
       }},
      // DeepSeek-V3.2: YaRN RoPE (interleaved MLA, half-split indexer), grouped routing, DSA, MTP.
      {"deepseek-v3.2", "tiny-deepseek-v3.2.json", [](nlohmann::json&) {}},
      // KDA + sliding-window (GQA, RoPE, window 16 < the test length) + Gated DSA layers by layer_types, MTP.
      {"hybrid-swa", "tiny-hybrid-swa.json", [](nlohmann::json&) {}},
      // The same with a window of 3: most keys are masked.
      {"hybrid-swa-window3", "tiny-hybrid-swa.json", [](nlohmann::json& j) { j["sliding_window"] = 3; }},
      // The same without the indexer: dense MLA with RoPE.
      {"deepseek-v3-dense-mla", "tiny-deepseek-v3.2.json",
       [](nlohmann::json& j) {
         no_dsa(j);
         j["model_type"] = "deepseek_v3";
         j["architectures"] = {"DeepseekV3ForCausalLM"};
       }},
  };
  return v;
}

// One process-wide scratch directory, removed at exit; one checkpoint per variant.
class scratch {
 public:
  static scratch& get() {
    static scratch s;
    return s;
  }
  const std::string& dir() const { return dir_; }
  const std::string& checkpoint(const variant& v) {
    auto it = made_.find(v.name);
    if (it != made_.end()) return it->second;
    std::ifstream in(std::string(MOXI_SOURCE_DIR) + "/configs/" + v.base);
    auto doc = nlohmann::json::parse(in);
    v.edit(doc);
    const std::string out = dir_ + "/" + v.name;
    model::init_options o;
    o.seed = 11;
    o.float_type = dtype::F32;
    o.show_progress = false;
    model::init_checkpoint(model::parse_model_config(doc, v.name), out, o);
    return made_[v.name] = out;
  }
  ~scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

 private:
  scratch() {
    std::string t = (fs::temp_directory_path() / "moxi-golden-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp");
    dir_ = t;
  }
  std::string dir_;
  std::map<std::string, std::string> made_;
};

std::vector<token_id> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> d(0, int(vocab) - 1);
  std::vector<token_id> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

torch::Tensor as_tensor(const std::vector<token_id>& t) {
  std::vector<int64_t> v(t.begin(), t.end());
  return torch::tensor(v, torch::kInt64).view({1, int64_t(v.size())});
}

// Max |a - b| over two equally long float arrays (NaN counts as infinitely far).
double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

// "layers.3.mla.o" -> the checkpoint tensors of that layer, for the mismatch message.
std::string tensors_of(const std::string& dump_name, const formats::model_config& c) {
  std::string layer;
  if (dump_name.rfind("layers.", 0) == 0) {
    layer = dump_name.substr(7, dump_name.find('.', 7) - 7);
  } else if (dump_name.rfind("mtp.", 0) == 0) {
    layer = std::to_string(c.num_layers + std::stoll(dump_name.substr(4, dump_name.find('.', 4) - 4)));
  } else {
    return "model.embed_tokens / model.norm / lm_head";
  }
  return "model.layers." + layer + ".*";
}

struct comparison {
  double logits = 0;      // max abs diff of the logits
  std::string first_bad;  // first intermediate over kDumpTol, with its difference
  int compared = 0;       // intermediates both sides produced
};

// Compares every intermediate the two sides both produced, in the engine's order. Values are [T, ...] on the
// engine side and [1, T, ...] on the trainer side (same row-major order).
comparison compare(const std::vector<std::pair<std::string, std::vector<float>>>& eng,
                   const train::dump_map& tr, const std::string& logits_name,
                   const formats::model_config& c) {
  comparison r;
  for (const auto& [name, vals] : eng) {
    auto it = tr.find(name);
    if (it == tr.end()) continue;
    const auto t = it->second.contiguous();
    if (t.numel() != int64_t(vals.size())) {
      if (r.first_bad.empty())
        r.first_bad = name + ": " + std::to_string(t.numel()) + " values in the trainer vs " +
                      std::to_string(vals.size()) + " in the engine (" + tensors_of(name, c) + ")";
      continue;
    }
    const double d = max_abs_diff(vals.data(), t.data_ptr<float>(), t.numel());
    ++r.compared;
    if (name == logits_name) r.logits = d;
    double scale = 1;
    for (float v : vals) scale = std::max(scale, double(std::fabs(v)));
    if (d > kDumpTol * scale && r.first_bad.empty()) {
      std::ostringstream o;
      o << name << ": max abs diff " << d << " (tensors " << tensors_of(name, c) << ")";
      r.first_bad = o.str();
    }
  }
  return r;
}

class Golden : public ::testing::TestWithParam<variant> {};

TEST_P(Golden, TrainerLogitsEqualEngineLogits) {
  const variant& v = GetParam();
  const std::string dir = scratch::get().checkpoint(v);
  const auto engine = model::model::load(dir);
  const auto& c = engine.config();
  const auto tokens = random_tokens(kTokens, c.vocab_size, 5);

  // Engine: one prefill with every intermediate captured.
  std::vector<std::pair<std::string, std::vector<float>>> eng;
  model::dump_sink sink{[](std::string_view) { return true; },
                        [&](const std::string& n, const std::vector<int64_t>& shape, const float* d) {
                          int64_t numel = 1;
                          for (int64_t s : shape) numel *= s;
                          eng.push_back({n, std::vector<float>(d, d + numel)});
                        }};
  auto cache = engine.new_cache();
  std::vector<float> hidden;
  model::forward_options o;
  o.dump = &sink;
  o.hidden = &hidden;
  engine.forward(tokens, *cache, o);

  // Trainer: the same tokens as one [1, T] batch.
  const auto trainer = train::train_model::load(dir);
  torch::NoGradGuard no_grad;
  train::dump_map tr;
  const auto out = trainer.forward(as_tensor(tokens), &tr);
  const auto main = compare(eng, tr, "logits", c);
  std::printf("[golden] %-32s logits max abs diff %.3g\n", v.name.c_str(), main.logits);
  EXPECT_LE(main.logits, kLogitsTol) << v.name << ": first intermediate that differs: " << main.first_bad;
  EXPECT_TRUE(main.first_bad.empty()) << v.name << ": " << main.first_bad;
  // Every layer's norms, attention, FFN and their internals were compared, not just the logits.
  EXPECT_GE(main.compared, 8 * c.num_layers) << v.name;

  if (c.num_mtp_layers > 0) {
    // MTP depth 0 over positions 0..T-2, reading h_i and t_{i+1}.
    const int64_t T1 = kTokens - 1, d = c.hidden_size;
    eng.clear();
    const std::vector<token_id> next(tokens.begin() + 1, tokens.end());
    model::forward_options mo;
    mo.dump = &sink;
    engine.mtp_forward(std::span<const float>(hidden.data(), size_t(T1 * d)), next, *cache, 0, mo);
    train::dump_map mtr;
    trainer.mtp_forward(out.hidden.slice(1, 0, T1), as_tensor(next), 0, &mtr);
    const auto mtp = compare(eng, mtr, "mtp.0.logits", c);
    std::printf("[golden] %-32s MTP logits max abs diff %.3g\n", v.name.c_str(), mtp.logits);
    EXPECT_LE(mtp.logits, kLogitsTol) << v.name << " MTP: first intermediate that differs: " << mtp.first_bad;
    EXPECT_TRUE(mtp.first_bad.empty()) << v.name << " MTP: " << mtp.first_bad;
  }
}

TEST_P(Golden, Mxfp4ExpertsDecodeBitIdentically) {
  const variant& v = GetParam();
  const std::string dir = scratch::get().checkpoint(v);
  const auto c = model::load_model_config(dir);
  if (!c.quant || c.quant->method != formats::quant_method::MXFP4) GTEST_SKIP() << "no MXFP4 experts";
  const auto trainer = train::train_model::load(dir);
  const auto ckpt = formats::checkpoint::open(dir);
  model::load_options lo;
  lo.dequantize_experts = true;  // the engine's own decode of the packed bytes
  model::weight_loader ld(ckpt, c, lo);
  int checked = 0;
  for (const auto& d : trainer.manifest()) {
    if (!d.routed_expert) continue;
    ASSERT_TRUE(ckpt.contains(model::mx_blocks_name(d.name))) << d.name << " is not stored as MXFP4";
    const auto e = ld.expert(d.name, d.shape[0], d.shape[1]);
    const auto t = trainer.params().at(d.name).detach().contiguous();
    ASSERT_EQ(int64_t(e.f32.size()), t.numel()) << d.name;
    ASSERT_EQ(std::memcmp(e.f32.data(), t.data_ptr<float>(), e.f32.size() * sizeof(float)), 0)
        << d.name << ": the trainer's MXFP4 decode differs from the engine's";
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// What the trainer writes (F32, experts re-encoded to MXFP4 when quantized) the engine serves with the same
// logits as the original checkpoint: the formats agree both ways.
TEST_P(Golden, SavedCheckpointServesTheSameLogits) {
  const variant& v = GetParam();
  const std::string dir = scratch::get().checkpoint(v);
  const auto trainer = train::train_model::load(dir);
  const std::string out = scratch::get().dir() + "/" + v.name + ".saved";
  trainer.save(out);
  const auto a = model::model::load(dir), b = model::model::load(out);
  const auto tokens = random_tokens(kTokens, a.config().vocab_size, 9);
  auto ca = a.new_cache(), cb = b.new_cache();
  const auto la = a.forward(tokens, *ca), lb = b.forward(tokens, *cb);
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(max_abs_diff(la.data(), lb.data(), int64_t(la.size())), 0.0) << v.name;
}

// A wrong weight is reported at the first intermediate it changes, with the layer's tensors named.
TEST(GoldenCheck, MismatchNamesTheLayerAndTensor) {
  const std::string dir = scratch::get().checkpoint(variants()[0]);
  const auto engine = model::model::load(dir);
  const auto tokens = random_tokens(kTokens, engine.config().vocab_size, 5);
  std::vector<std::pair<std::string, std::vector<float>>> eng;
  model::dump_sink sink{[](std::string_view) { return true; },
                        [&](const std::string& n, const std::vector<int64_t>& shape, const float* d) {
                          int64_t numel = 1;
                          for (int64_t s : shape) numel *= s;
                          eng.push_back({n, std::vector<float>(d, d + numel)});
                        }};
  auto cache = engine.new_cache();
  model::forward_options o;
  o.dump = &sink;
  engine.forward(tokens, *cache, o);
  auto trainer = train::train_model::load(dir);
  torch::NoGradGuard no_grad;
  trainer.params().at("model.layers.3.self_attn.g_proj.weight").add_(0.05);  // the Gated DSA output gate
  train::dump_map tr;
  trainer.forward(as_tensor(tokens), &tr);
  const auto r = compare(eng, tr, "logits", engine.config());
  EXPECT_GT(r.logits, kLogitsTol);
  EXPECT_EQ(r.first_bad.rfind("layers.3.mla.gated: ", 0), 0u) << r.first_bad;
  EXPECT_NE(r.first_bad.find("model.layers.3.*"), std::string::npos) << r.first_bad;
}

// Training runs batches: each row of a [B, T] forward equals that sequence alone (DSA selection, routing and
// expert dispatch are per token, the KDA state per row).
TEST(GoldenCheck, BatchRowsEqualSingleSequences) {
  for (const auto& v : {variants()[0], variants()[5]}) {
    const auto trainer = train::train_model::load(scratch::get().checkpoint(v));
    torch::NoGradGuard no_grad;
    const auto a = as_tensor(random_tokens(kTokens, trainer.config().vocab_size, 21));
    const auto b = as_tensor(random_tokens(kTokens, trainer.config().vocab_size, 22));
    const auto both = trainer.forward(torch::cat({a, b}, 0)).logits;
    const auto la = trainer.forward(a).logits, lb = trainer.forward(b).logits;
    EXPECT_LE((both.slice(0, 0, 1) - la).abs().max().item<double>(), 1e-5) << v.name;
    EXPECT_LE((both.slice(0, 1, 2) - lb).abs().max().item<double>(), 1e-5) << v.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, Golden, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<variant>& i) {
                           std::string n = i.param.name;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

// QAT: the fake-quant forward is mx::fake_quantize exactly; the backward passes the gradient through.
TEST(FakeQuant, ForwardIsTheEngineCodecAndBackwardIsStraightThrough) {
  torch::manual_seed(3);
  auto x = (torch::randn({4, 64}) * 3).requires_grad_(true);
  const auto y = train::mx_fake_quant(x, mx::elem_format::FP4_E2M1);
  std::vector<float> want(size_t(x.numel()));
  const auto xc = x.detach().contiguous();
  mx::fake_quantize(mx::elem_format::FP4_E2M1, xc.data_ptr<float>(), want.size(), want.data());
  EXPECT_EQ(std::memcmp(want.data(), y.contiguous().data_ptr<float>(), want.size() * sizeof(float)), 0);
  (y * torch::arange(256).view({4, 64})).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), torch::arange(256).view({4, 64}).to(torch::kFloat32)));
  // MXFP4 encode/decode through the shared codec is the same fake-quant.
  const auto [blocks, scales] = train::mxfp4_encode(x.detach());
  const auto dec = train::mxfp4_decode(blocks.data_ptr<uint8_t>(), scales.data_ptr<uint8_t>(), 4, 64);
  EXPECT_TRUE(torch::equal(dec, y.detach()));
}

// The FP8 row op (QAT's rounding of the DSA index keys) is mx::fake_quantize_fp8_row per last-dimension row,
// with an identity gradient.
TEST(FakeQuant, Fp8RowOpIsTheCodecPerRowWithStraightThroughGradient) {
  torch::manual_seed(3);
  auto x = (torch::randn({3, 5, 24}) * torch::pow(2.0, torch::arange(3).view({3, 1, 1}) * 6 - 6))
               .requires_grad_(true);
  const auto y = train::fp8_row_fake_quant(x);
  const auto xc = x.detach().contiguous();
  std::vector<float> want(size_t(x.numel()));
  for (int64_t r = 0; r < 15; ++r)
    mx::fake_quantize_fp8_row(xc.data_ptr<float>() + r * 24, 24, want.data() + r * 24);
  EXPECT_EQ(std::memcmp(want.data(), y.contiguous().data_ptr<float>(), want.size() * sizeof(float)), 0);
  EXPECT_FALSE(torch::equal(y.detach(), xc));  // it does round
  (y * torch::arange(360).view({3, 5, 24})).sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), torch::arange(360).view({3, 5, 24}).to(torch::kFloat32)));
}

// QAT on weights already on the MXFP4 grid changes nothing (decode(encode(decode)) is the identity), and the
// gradient still reaches the expert weights. Attention is dense in both models, so that the comparison is of
// the experts alone.
TEST(FakeQuant, QatForwardOnMxfp4CheckpointEqualsPlainForwardAndTrainsExperts) {
  const std::string dir = scratch::get().checkpoint(variants()[0]);
  train::train_options po, qo;
  po.dsa_dense = qo.dsa_dense = true;
  qo.qat = true;
  const auto plain = train::train_model::load(dir, po);
  const auto qat = train::train_model::load(dir, qo);
  const auto tokens = as_tensor(random_tokens(12, plain.config().vocab_size, 4));
  const auto lp = plain.forward(tokens).logits.detach();
  const auto lq = qat.forward(tokens);
  EXPECT_TRUE(torch::equal(lp, lq.logits.detach()));
  lq.logits.logsumexp(-1).sum().backward();
  double gsum = 0;
  for (const auto& d : qat.manifest())
    if (d.routed_expert && qat.params().at(d.name).grad().defined())
      gsum += qat.params().at(d.name).grad().abs().sum().item<double>();
  EXPECT_GT(gsum, 0.0);
}

}  // namespace
