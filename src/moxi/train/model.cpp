// The trainer's forward pass in libtorch (see model.h). Every op mirrors the engine's reference forward
// (src/moxi/model/layers/*.cpp) in fp32 so that the golden test can hold the two within 1e-4; where the two
// differ in form (recurrent vs chunked KDA, expanded vs absorbed MLA) they are the same function.
#include "moxi/train/model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "moxi/base/error.h"
#include "moxi/formats/checkpoint.h"
#include "moxi/formats/convert.h"
#include "moxi/kernels/ref/mla.h"
#include "moxi/model/config.h"
#include "moxi/model/init.h"
#include "moxi/model/layers/rope.h"
#include "moxi/model/layers/weights.h"
#include "moxi/train/dense.h"
#include "moxi/train/fake-quant.h"
#include "moxi/train/kda-core.h"
#include "moxi/train/vision.h"

namespace moxi::train {

namespace F = torch::nn::functional;
namespace ref = kernels::ref;
using model::yarn_of;

namespace {

// DeepSeek-V3.2 Indexer: k_norm = LayerNorm(index_head_dim) with the torch default eps (as the engine).
constexpr double kIndexerKeyNormEps = 1e-6;
// KDA's q/k L2 norm eps (docs/kimi-linear.md §1.2, the engine's ref::l2norm default).
constexpr double kL2NormEps = 1e-6;

// The engine's RoPE tables for positions 0..T-1 (constants: no gradient flows into them), f32 [T, R/2].
std::pair<torch::Tensor, torch::Tensor> rope_tables(const formats::model_config& c, int64_t T, int64_t R) {
  const auto yarn = yarn_of(c.rope);
  std::vector<double> inv(static_cast<size_t>(R / 2));
  ref::rope_inv_freq(yarn, R, inv.data());
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = t;
  auto cos_t = torch::empty({T, R / 2}, torch::kFloat32), sin_t = torch::empty({T, R / 2}, torch::kFloat32);
  ref::rope_cos_sin(pos.data(), inv.data(), ref::yarn_attention_factor(yarn), cos_t.data_ptr<float>(),
                    sin_t.data_ptr<float>(), T, R);
  return {cos_t, sin_t};
}

// x [B, T, ..., R] rotated by cos_t/sin_t [T, R/2]: interleaved pairs (2i, 2i+1) for MLA, half-split pairs
// (i, i+R/2) for the indexer.
torch::Tensor rope(const torch::Tensor& x, torch::Tensor cos_t, torch::Tensor sin_t, bool interleaved) {
  cos_t = cos_t.unsqueeze(0);
  sin_t = sin_t.unsqueeze(0);
  for (int64_t d = 3; d < x.dim(); ++d) {
    cos_t = cos_t.unsqueeze(2);
    sin_t = sin_t.unsqueeze(2);
  }
  const int64_t half = x.size(-1) / 2;
  if (interleaved) {
    const auto xr = x.unflatten(-1, {half, 2});
    const auto a = xr.select(-1, 0), b = xr.select(-1, 1);
    return torch::stack({a * cos_t - b * sin_t, a * sin_t + b * cos_t}, -1).flatten(-2);
  }
  const auto a = x.slice(-1, 0, half), b = x.slice(-1, half);
  return torch::cat({a * cos_t - b * sin_t, a * sin_t + b * cos_t}, -1);
}

void put(dump_map* dump, const std::string& name, const torch::Tensor& t) {
  if (dump) (*dump)[name] = t.detach().to(torch::kFloat32).clone();
}

mx::elem_format act_elem(const formats::model_config& c, bool& on) {
  const auto aq = model::activation_quant(c);
  on = aq != model::act_quant::NONE;
  return aq == model::act_quant::MXFP8_E5M2 ? mx::elem_format::FP8_E5M2 : mx::elem_format::FP8_E4M3;
}

}  // namespace

train_model::train_model(formats::model_config config, train_options opts)
    : config_(std::move(config)), opts_(opts) {
  const auto& arch = model::arch::find_architecture(config_);
  layout_ = arch.layout(config_);
  for (auto& d : arch.manifest(config_)) {
    params_[d.name] = torch::zeros(d.shape, torch::kFloat32);
    manifest_.push_back(std::move(d));
  }
}

train_model train_model::load(const std::string& dir, train_options opts) {
  return load(model::load_model_config(dir), dir, opts);
}

train_model train_model::load(formats::model_config config, const std::string& checkpoint_path,
                              train_options opts) {
  train_model m(std::move(config), opts);
  const auto ckpt = formats::checkpoint::open(checkpoint_path);
  // The engine's loader does the name/shape checks and every float conversion, so both read the same f32.
  model::weight_loader ld(ckpt, m.config_, {});
  for (const auto& d : m.manifest_) {
    torch::Tensor t;
    const std::string bname = model::mx_blocks_name(d.name);
    if (d.routed_expert && ckpt.contains(bname)) {
      // Packed MXFP4: decoded with mx::dequantize_mxfp4, bit-identical to the engine's decode (tested).
      const int64_t N = d.shape[0], K = d.shape[1];
      ld.expert(d.name, N, K);  // validates the blocks/scales shapes and dtypes, names the tensor on error
      const auto bv = ckpt.view(bname), sv = ckpt.view(model::mx_scales_name(d.name));
      t = mxfp4_decode(reinterpret_cast<const uint8_t*>(bv.data), reinterpret_cast<const uint8_t*>(sv.data),
                       N, K);
    } else {
      auto v = ld.f32(d.name, d.shape);
      t = torch::from_blob(v.data(), d.shape, torch::kFloat32).clone();
    }
    m.params_[d.name] = t.requires_grad_(true);
  }
  return m;
}

train_model train_model::init(formats::model_config config, uint64_t seed, train_options opts) {
  train_model m(std::move(config), opts);
  for (const auto& d : m.manifest_) {
    auto t = torch::empty(d.shape, torch::kFloat32);
    model::init_values(m.config_, d, seed, t.data_ptr<float>());
    m.params_[d.name] = t.requires_grad_(true);
  }
  return m;
}

void train_model::save(const std::string& out_dir, const save_options& opts) const {
  namespace fs = std::filesystem;
  if (opts.float_type != dtype::F32 && opts.float_type != dtype::BF16)
    throw error("train_model::save: float_type must be F32 or BF16");
  const bool mxfp4 =
      opts.mxfp4_experts && config_.quant && config_.quant->method == formats::quant_method::MXFP4;
  std::vector<torch::Tensor> keep;  // owns the bytes until the write
  std::vector<std::pair<formats::tensor_spec, const void*>> tensors;
  for (const auto& d : manifest_) {
    const auto w = params_.at(d.name).detach().to(torch::kFloat32).contiguous();
    if (d.routed_expert && mxfp4) {
      auto [blocks, scales] = mxfp4_encode(w);
      tensors.push_back(
          {{model::mx_blocks_name(d.name), dtype::U8, blocks.sizes().vec()}, blocks.data_ptr()});
      tensors.push_back(
          {{model::mx_scales_name(d.name), dtype::U8, scales.sizes().vec()}, scales.data_ptr()});
      keep.push_back(blocks);
      keep.push_back(scales);
    } else if (opts.float_type == dtype::BF16 && !d.fp32) {  // A_log, dt_bias, biases stay F32 (manifest)
      auto b = torch::empty({w.numel()}, torch::kInt16);     // raw BF16 bits
      formats::from_f32(dtype::BF16, w.data_ptr<float>(), size_t(w.numel()), b.data_ptr());
      tensors.push_back({{d.name, dtype::BF16, d.shape}, b.data_ptr()});
      keep.push_back(b);
    } else {
      tensors.push_back({{d.name, dtype::F32, d.shape}, w.data_ptr()});
      keep.push_back(w);
    }
  }
  fs::create_directories(out_dir);
  formats::write_safetensors(out_dir + "/" + formats::checkpoint::kSingleName, tensors);
  auto doc = config_.json;  // vision_config stays: the trainer carries (and saves) the vision weights
  // The config describes the tensors as written: without real MXFP4 experts the checkpoint is unquantized
  // (F32 master weights), and a quantization_config would make every reader expect blocks and scales.
  if (config_.quant && !mxfp4) doc.erase("quantization_config");
  std::ofstream(out_dir + "/config.json") << doc.dump(2) << "\n";
}

const torch::Tensor& train_model::p(const std::string& name) const {
  auto it = params_.find(name);
  if (it == params_.end()) throw error("train_model: no parameter '" + name + "'");
  return it->second;
}

torch::Tensor train_model::lin(const torch::Tensor& x, const std::string& prefix) const {
  return linear_nt(x, p(prefix + ".weight"));
}

torch::Tensor train_model::rms(const torch::Tensor& x, const std::string& weight) const {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + config_.rms_norm_eps) * p(weight);
}

torch::Tensor train_model::kda(const torch::Tensor& x, const std::string& pre, const std::string& name,
                               dump_map* dump) const {
  const auto& k = *config_.kda;
  const int64_t B = x.size(0), T = x.size(1), H = k.num_heads, D = k.head_dim, P = k.proj_dim();
  const int64_t W = k.conv_kernel;
  // q/k/v: projection -> causal depthwise conv (left zero padding = empty conv state) -> SiLU.
  auto conv = [&](const std::string& n) {
    auto y = lin(x, pre + "." + n + "_proj").transpose(1, 2);  // [B, P, T]
    y = F::pad(y, F::PadFuncOptions({W - 1, 0}));
    y = F::conv1d(y, p(pre + "." + n + "_conv1d.weight"), F::Conv1dFuncOptions().groups(P));
    return torch::silu(y.transpose(1, 2)).reshape({B, T, H, D});
  };
  auto l2 = [](const torch::Tensor& t) { return t / torch::sqrt(t.pow(2).sum(-1, true) + kL2NormEps); };
  const auto q = l2(conv("q")), kk = l2(conv("k")), v = conv("v");

  // Log-space decay g [B, T, H, D] from the low-rank f_b(f_a(x)).
  const auto z =
      lin(lin(x, pre + ".f_a_proj"), pre + ".f_b_proj").view({B, T, H, D}) + p(pre + ".dt_bias").view({H, D});
  const auto a = torch::exp(p(pre + ".A_log").view({1, 1, H, 1}));
  const auto g = k.gate == formats::kda_gate_kind::LOWER_BOUND
                     ? float(k.gate_lower_bound) * torch::sigmoid(a * z)
                     : -a * F::softplus(z, F::SoftplusFuncOptions().beta(1).threshold(20));
  const auto beta = torch::sigmoid(lin(x, pre + ".b_proj"));  // [B, T, H]
  put(dump, name + ".q", q);
  put(dump, name + ".k", kk);
  put(dump, name + ".v", v);
  put(dump, name + ".g", g);
  put(dump, name + ".beta", beta);

  // Delta-rule core in fp32 (decay first, then the update; o_t reads the new state), chunkwise unless the
  // options ask for the token-by-token recurrence (the same function: tests/train/kda-core-test.cpp).
  const double scale = 1.0 / std::sqrt(double(D));
  auto o = opts_.kda_chunk > 0 ? kda_chunked(q, kk, v, g, beta, scale, opts_.kda_chunk)
                               : kda_recurrent(q, kk, v, g, beta, scale);  // [B, T, H, V]
  put(dump, name + ".core", o);

  const auto gate =
      (k.full_rank_output_gate ? lin(x, pre + ".g_proj") : lin(lin(x, pre + ".g_a_proj"), pre + ".g_b_proj"))
          .view({B, T, H, D});
  o = o * torch::rsqrt(o.pow(2).mean(-1, true) + config_.rms_norm_eps) * p(pre + ".o_norm.weight") *
      torch::sigmoid(gate);
  put(dump, name + ".gated", o);
  return lin(o.reshape({B, T, P}), pre + ".o_proj");
}

// Sliding-window attention (the engine's layers/swa.cpp): GQA, half-split RoPE over the whole head, a
// causal mask limited to the last `window` keys.
torch::Tensor train_model::swa(const torch::Tensor& x, const std::string& pre, const std::string& name,
                               dump_map* dump) const {
  const auto& s = *config_.swa;
  const int64_t B = x.size(0), T = x.size(1), H = s.num_heads, KVH = s.num_kv_heads, D = s.head_dim;
  auto q = lin(x, pre + ".q_proj").view({B, T, H, D});
  auto k = lin(x, pre + ".k_proj").view({B, T, KVH, D});
  const auto v = lin(x, pre + ".v_proj").view({B, T, KVH, D}).repeat_interleave(H / KVH, 2);
  const auto [cos_t, sin_t] = rope_tables(config_, T, D);
  q = rope(q, cos_t, sin_t, false);
  k = rope(k, cos_t, sin_t, false).repeat_interleave(H / KVH, 2);
  put(dump, name + ".q", q);
  const double mscale = ref::yarn_softmax_mscale(yarn_of(config_.rope));
  const double scale = 1.0 / std::sqrt(double(D)) * mscale * mscale;
  auto scores = torch::einsum("bthd,bshd->bhts", {q, k}) * scale;  // [B, H, T, S=T]
  const auto t = torch::arange(T).unsqueeze(1), j = torch::arange(T).unsqueeze(0);
  const auto visible = (j <= t).logical_and(j > t - s.window);  // [T, T]
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<float>::infinity());
  const auto o = torch::einsum("bhts,bshd->bthd", {torch::softmax(scores, -1), v});  // [B, T, H, D]
  put(dump, name + ".o", o);
  return lin(o.reshape({B, T, H * D}), pre + ".o_proj");
}

torch::Tensor train_model::mla(const torch::Tensor& x, const std::string& pre, const std::string& name,
                               dump_map* dump, forward_stats* stats) const {
  const auto& m = *config_.mla;
  const int64_t B = x.size(0), T = x.size(1), H = m.num_heads, Dn = m.qk_nope_head_dim;
  const int64_t Dr = m.qk_rope_head_dim, Dv = m.v_head_dim, L = m.kv_lora_rank;
  torch::Tensor cq, q;
  if (m.q_lora_rank) {
    cq = rms(lin(x, pre + ".q_a_proj"), pre + ".q_a_layernorm.weight");
    q = lin(cq, pre + ".q_b_proj");
  } else {
    q = lin(x, pre + ".q_proj");
  }
  q = q.view({B, T, H, Dn + Dr});
  const auto kv = lin(x, pre + ".kv_a_proj_with_mqa");
  const auto c = rms(kv.slice(-1, 0, L), pre + ".kv_a_layernorm.weight");  // [B, T, L]
  auto kpe = kv.slice(-1, L);                                              // [B, T, Dr]
  torch::Tensor cos_t, sin_t;
  double mscale = 1.0;
  if (!m.use_nope) {
    std::tie(cos_t, sin_t) = rope_tables(config_, T, Dr);
    q = torch::cat({q.slice(-1, 0, Dn), rope(q.slice(-1, Dn), cos_t, sin_t, true)}, -1);
    kpe = rope(kpe, cos_t, sin_t, true);
    mscale = ref::yarn_softmax_mscale(yarn_of(config_.rope));
  }
  put(dump, name + ".q", q);
  put(dump, name + ".latent", torch::cat({c, kpe}, -1));

  // Expanded (MHA) form: per-head keys and values from the latent through kv_b (absorbed = same function).
  const auto kvb = p(pre + ".kv_b_proj.weight").view({H, Dn + Dv, L});
  const auto k_nope = torch::einsum("btl,hnl->bthn", {c, kvb.slice(1, 0, Dn)});
  const auto v = torch::einsum("btl,hvl->bthv", {c, kvb.slice(1, Dn)});
  const auto k = torch::cat({k_nope, kpe.unsqueeze(2).expand({B, T, H, Dr})}, -1);
  const float scale = float(1.0 / std::sqrt(double(Dn + Dr)) * mscale * mscale);
  auto scores = torch::einsum("bthd,bshd->bhts", {q, k}) * scale;  // [B, H, T, S]
  auto allowed = torch::ones({T, T}, torch::kBool).tril().unsqueeze(0).expand({B, T, T});

  if (config_.dsa) {
    const auto& d = *config_.dsa;
    const int64_t HI = d.index_n_heads, DI = d.index_head_dim;
    // The indexer reads detached inputs: only its KL objective trains it, never the language-model loss
    // (DeepSeek-V3.2), and the top-k it produces is a discrete choice anyway.
    const auto xd = x.detach();
    auto qI = lin(cq.detach(), pre + ".indexer.wq_b").view({B, T, HI, DI});
    auto kI = F::layer_norm(lin(xd, pre + ".indexer.wk"), F::LayerNormFuncOptions({DI})
                                                              .weight(p(pre + ".indexer.k_norm.weight"))
                                                              .bias(p(pre + ".indexer.k_norm.bias"))
                                                              .eps(kIndexerKeyNormEps));
    if (!m.use_nope) {  // half-split, rope dims first (not interleaved: the reference note's trap)
      qI = torch::cat({rope(qI.slice(-1, 0, Dr), cos_t, sin_t, false), qI.slice(-1, Dr)}, -1);
      kI = torch::cat({rope(kI.slice(-1, 0, Dr), cos_t, sin_t, false), kI.slice(-1, Dr)}, -1);
    }
    // The engine caches index keys in FP8 (kernels/ref/dsa.h): its rounding, straight-through.
    kI = fp8_row_fake_quant(kI);
    const float wscale = float(1.0 / std::sqrt(double(HI)) / std::sqrt(double(DI)));
    const auto wts = lin(xd, pre + ".indexer.weights_proj") * wscale;  // [B, T, HI]
    auto I = (wts.unsqueeze(-1) * torch::relu(torch::einsum("btjd,bsd->btjs", {qI, kI}))).sum(2);  // [B,T,S]
    I = I.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
    put(dump, name + ".index_scores", I);
    // Top-k by index score, ties to the lower position (a stable descending sort, as the engine's order).
    torch::NoGradGuard no_grad;
    const int64_t kk = std::min(d.index_topk, T);
    const auto order = std::get<1>(I.detach().sort(/*stable=*/true, /*dim=*/-1, /*descending=*/true));
    const auto idx = order.slice(-1, 0, kk);
    auto sel = torch::zeros({B, T, T}, torch::kBool).scatter(-1, idx, true);
    if (!opts_.dsa_dense) allowed = allowed.logical_and(sel);
    if (stats) stats->indexer.push_back({I, {}, allowed});
    if (dump) {
      // Padded with -1 to index_topk, as the engine dumps: query t sees min(t+1, k) positions.
      auto f = torch::full({B, T, d.index_topk}, -1.0f);
      auto n = torch::arange(T).add(1).clamp_max(kk).view({1, T, 1});
      auto keep = torch::arange(kk).view({1, 1, kk}).lt(n);
      f.slice(-1, 0, kk).copy_(torch::where(keep, idx.to(torch::kFloat32), torch::full({}, -1.0f)));
      put(dump, name + ".topk", f);
    }
  }
  scores = scores.masked_fill(allowed.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
  const auto probs = torch::softmax(scores, -1);  // [B, H, T, S]
  if (stats && config_.dsa) {
    // KL target: the attention summed over heads, L1-normalized per query (DeepSeek-V3.2 §2.1).
    const auto t = probs.detach().sum(1);
    stats->indexer.back().target = t / t.sum(-1, true);
  }
  auto o = torch::einsum("bhts,bshv->bthv", {probs, v});  // [B, T, H, Dv]
  put(dump, name + ".o", o);
  if (m.output_gate) {
    o = o * torch::sigmoid(lin(x, pre + ".g_proj").view({B, T, H, Dv}));
    put(dump, name + ".gated", o);
  }
  return lin(o.reshape({B, T, H * Dv}), pre + ".o_proj");
}

torch::Tensor train_model::mlp(const torch::Tensor& x, const std::string& pre) const {
  return lin(torch::silu(lin(x, pre + ".gate_proj")) * lin(x, pre + ".up_proj"), pre + ".down_proj");
}

torch::Tensor train_model::moe(const torch::Tensor& x, const std::string& pre, const std::string& name,
                               dump_map* dump, forward_stats* stats) const {
  const auto& mc = config_.moe;
  const auto& names = layout_.ffn;
  const int64_t B = x.size(0), T = x.size(1), h = config_.hidden_size, N = B * T;
  const int64_t E = mc.num_experts, K = mc.experts_per_token, G = mc.num_groups;
  const auto xf = x.reshape({N, h});

  // Router in fp32: selection on the biased scores, weights from the unbiased ones.
  const auto s = torch::sigmoid(linear_nt(xf, p(pre + ".gate.weight")));  // [N, E]
  torch::Tensor sel;
  {
    torch::NoGradGuard no_grad;
    auto b = s.detach() + p(pre + ".gate.e_score_correction_bias").detach();
    if (G > 1) {
      // Group score = sum of the top two biased scores; excluded groups masked with -inf, never 0.
      const int64_t per = E / G;
      const auto gs = std::get<0>(b.view({N, G, per}).topk(std::min<int64_t>(2, per), -1)).sum(-1);  // [N, G]
      const auto gsel = std::get<1>(gs.sort(true, -1, true)).slice(-1, 0, mc.topk_group);
      const auto keep = torch::zeros({N, G}, torch::kBool).scatter(-1, gsel, true);
      b = b.masked_fill(keep.repeat_interleave(per, 1).logical_not(),
                        -std::numeric_limits<float>::infinity());
    }
    sel = std::get<1>(b.sort(true, -1, true)).slice(-1, 0, K).contiguous();  // [N, K], ties: lower id
  }
  auto w = s.gather(1, sel);
  if (mc.renormalize && K > 1) w = w / (w.sum(-1, true) + 1e-20f);
  w = w * float(mc.routed_scaling_factor);
  put(dump, name + ".experts", sel.view({B, T, K}));
  put(dump, name + ".weights", w.view({B, T, K}));
  if (stats)
    stats->moe.push_back({pre + ".gate.e_score_correction_bias", sel.view({B, T, K}), s.view({B, T, E})});

  torch::Tensor xe = xf;
  if (mc.latent_size) {
    xe = lin(xf, pre + ".latent_down_proj");
    if (mc.latent_norm) xe = rms(xe, pre + ".latent_norm.weight");
  }
  bool aq = false;
  const auto afmt = act_elem(config_, aq);
  auto quant_in = [&](const torch::Tensor& t) { return aq ? mx_fake_quant(t, afmt) : t; };
  auto weight = [&](const std::string& n) {
    const auto& wt = p(n);
    return opts_.qat ? mx_fake_quant(wt, mx::elem_format::FP4_E2M1) : wt;
  };

  // Dispatch per expert: gather its tokens, SwiGLU, weighted scatter-add (the engine's order of experts).
  auto acc = torch::zeros({N, xe.size(1)}, torch::kFloat32);
  const auto sel_a = sel.accessor<int64_t, 2>();
  std::vector<std::vector<int64_t>> tok(static_cast<size_t>(E)), slot(static_cast<size_t>(E));
  for (int64_t t = 0; t < N; ++t)
    for (int64_t j = 0; j < K; ++j) {
      tok[size_t(sel_a[t][j])].push_back(t);
      slot[size_t(sel_a[t][j])].push_back(t * K + j);
    }
  const auto wflat = w.reshape({N * K});
  for (int64_t e = 0; e < E; ++e) {
    if (tok[size_t(e)].empty()) continue;
    const auto ti = torch::tensor(tok[size_t(e)], torch::kInt64);
    const auto si = torch::tensor(slot[size_t(e)], torch::kInt64);
    const std::string xp = pre + ".experts." + std::to_string(e) + ".";
    const auto xin = quant_in(xe.index_select(0, ti));
    const auto g = linear_nt(xin, weight(xp + names.expert_gate + ".weight"));
    const auto u = linear_nt(xin, weight(xp + names.expert_up + ".weight"));
    const auto y = linear_nt(quant_in(torch::silu(g) * u), weight(xp + names.expert_down + ".weight"));
    acc = acc.index_add(0, ti, y * wflat.index_select(0, si).unsqueeze(1));
  }
  auto out = mc.latent_size ? lin(acc, pre + ".latent_up_proj") : acc;
  put(dump, name + ".routed", out.view({B, T, h}));
  if (mc.num_shared_experts > 0) {
    const auto sh = mlp(xf, pre + ".shared_experts");
    put(dump, name + ".shared", sh.view({B, T, h}));
    out = out + sh;
  }
  return out.view({B, T, h});
}

torch::Tensor train_model::block(const torch::Tensor& h0, const model::arch::layer_layout& lay,
                                 const std::string& name, dump_map* dump, forward_stats* stats) const {
  auto xn = rms(h0, lay.prefix + ".input_layernorm.weight");
  put(dump, name + ".attn_norm", xn);
  torch::Tensor a;
  switch (lay.attn) {
    case formats::attn_kind::KDA:
      a = kda(xn, lay.prefix + ".self_attn", name + ".kda", dump);
      break;
    case formats::attn_kind::MLA:
      a = mla(xn, lay.prefix + ".self_attn", name + ".mla", dump, stats);
      break;
    case formats::attn_kind::SWA:
      a = swa(xn, lay.prefix + ".self_attn", name + ".swa", dump);
      break;
  }
  put(dump, name + ".attn_out", a);
  auto h = h0 + a;
  xn = rms(h, lay.prefix + ".post_attention_layernorm.weight");
  put(dump, name + ".ffn_norm", xn);
  const auto f = lay.moe ? moe(xn, lay.prefix + "." + layout_.ffn.moe_prefix, name + ".moe", dump, stats)
                         : mlp(xn, lay.prefix + ".mlp");
  put(dump, name + ".ffn_out", f);
  h = h + f;
  put(dump, name + ".out", h);
  return h;
}

torch::Tensor train_model::head(const torch::Tensor& h) const {
  return linear_nt(h, config_.tie_word_embeddings ? p(layout_.embed) : p(layout_.lm_head));
}

torch::Tensor train_model::encode_images(std::span<const model::image_input> images, dump_map* dump) const {
  return vision_forward(config_, [this](const std::string& name) -> const torch::Tensor& { return p(name); }, images,
                        dump);
}

train_model::output train_model::forward(const torch::Tensor& tokens, dump_map* dump, forward_stats* stats,
                                         const torch::Tensor& media) const {
  if (tokens.dim() != 2) throw error("train_model::forward: tokens must be [B, T]");
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (tokens.numel() &&
      (tokens.min().item<int64_t>() < 0 || tokens.max().item<int64_t>() >= config_.vocab_size))
    throw error("train_model::forward: token id outside [0, " + std::to_string(config_.vocab_size) + ")");
  auto h = p(layout_.embed).index_select(0, tokens.reshape({-1})).view({B, T, config_.hidden_size});
  if (media.defined() && media.numel()) {
    if (!config_.media_placeholder_token_id)
      throw error("train_model::forward: image features given, but the config has no media_placeholder_token_id");
    const auto mask = tokens.eq(*config_.media_placeholder_token_id);
    const int64_t n = mask.sum().item<int64_t>();
    if (media.dim() != 2 || media.size(0) != n || media.size(1) != config_.hidden_size)
      throw error("train_model::forward: " + std::to_string(media.size(0)) + " image feature rows for " +
                  std::to_string(n) + " image placeholder tokens");
    h = h.masked_scatter(mask.unsqueeze(-1).expand_as(h), media);
  }
  put(dump, "embed", h);
  for (size_t i = 0; i < layout_.layers.size(); ++i)
    h = block(h, layout_.layers[i], "layers." + std::to_string(i), dump, stats);
  h = rms(h, layout_.final_norm);
  put(dump, "final_norm", h);
  auto logits = head(h);
  put(dump, "logits", logits);
  return {logits, h};
}

torch::Tensor train_model::mtp_forward(const torch::Tensor& hidden, const torch::Tensor& next_tokens,
                                       int64_t depth, dump_map* dump, forward_stats* stats) const {
  if (depth < 0 || size_t(depth) >= layout_.mtp_layers.size())
    throw error(config_.source + ": MTP depth " + std::to_string(depth) + " requested, the model has " +
                std::to_string(layout_.mtp_layers.size()) + " MTP layer(s) (num_nextn_predict_layers)");
  const auto& lay = layout_.mtp_layers[size_t(depth)];
  const std::string name = "mtp." + std::to_string(depth);
  const int64_t B = next_tokens.size(0), T = next_tokens.size(1);
  const auto e =
      p(layout_.embed).index_select(0, next_tokens.reshape({-1})).view({B, T, config_.hidden_size});
  // Embedding FIRST, then the hidden state (DeepSeek-V3's order; the engine's test fails with them swapped).
  const auto cat =
      torch::cat({rms(e, lay.prefix + ".enorm.weight"), rms(hidden, lay.prefix + ".hnorm.weight")}, -1);
  auto h = lin(cat, lay.prefix + ".eh_proj");
  put(dump, name + ".eh_proj", h);
  h = block(h, lay, name, dump, stats);
  h = rms(h, lay.prefix + ".shared_head.norm.weight");
  put(dump, name + ".head_norm", h);
  auto logits = head(h);
  put(dump, name + ".logits", logits);
  return logits;
}

}  // namespace moxi::train
