// The tensor manifest: every stored tensor of a model, declared once per architecture (model/arch/) from
// its model_config, with HF names, logical shapes, storage dtype and its parameter group. `moxi init`,
// `moxi quantize`, `moxi inspect` and `moxi plan` all read this one list, so the planner's arithmetic and
// the files on disk cannot drift apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moxi/formats/model-config.h"
#include "moxi/tensor/dtype.h"

namespace moxi::model {

// What a parameter is, for the planner's breakdown and for active-parameter counting.
enum class param_group : uint8_t {
  EMBEDDING,       // token embedding table
  LM_HEAD,         // output projection (absent when tied)
  NORM,            // RMSNorms outside attention/FFN blocks (final norm)
  KDA,             // everything in a KDA attention block
  MLA,             // MLA / Gated DSA attention block incl. the lightning indexer
  SWA,             // sliding-window attention block
  ROUTER,          // MoE gate weight and correction bias
  ROUTED_EXPERTS,  // routed expert weights (MXFP4 when quantized)
  LATENT_PROJ,     // latent-MoE down/up projections and norm
  SHARED_EXPERTS,  // always-on shared experts
  DENSE_MLP,       // FFN of the first_k_dense layers
  LAYER_NORM,      // per-layer input/post-attention norms
  MTP,             // multi-token-prediction layer(s), counted apart
  VISION,          // vision tower and projector, counted apart
  COUNT
};
const char* param_group_name(param_group g);

// How `moxi init` fills a tensor (docs/model-spec.md and the public reference inits cited in init.cpp).
enum class init_kind : uint8_t {
  NORMAL,       // N(0, std) with std = initializer_range, scaled down for output projections
  NORMAL_OUT,   // N(0, std / sqrt(2 * num_layers)) for projections that write into the residual
  ONES,         // norm weights
  ZEROS,        // biases, correction bias
  CONV,         // U(-1/sqrt(W), 1/sqrt(W)) for depthwise conv kernels (fan_in = W)
  KDA_A_LOG,    // log(U(1, 16)) per head (Mamba/FLA A init)
  KDA_DT_BIAS,  // softplus^-1(dt), dt log-uniform in [1e-3, 1e-1]
};

struct tensor_decl {
  std::string name;            // HF name ("model.layers.3.self_attn.q_proj.weight")
  std::vector<int64_t> shape;  // logical shape; linears are [out, in]
  param_group group = param_group::NORM;
  init_kind init = init_kind::NORMAL;
  int64_t layer = -1;          // decoder layer (MTP layers continue after num_layers), -1 global
  bool fp32 = false;           // kept in F32 whatever the checkpoint dtype (A_log, dt_bias, biases)
  bool routed_expert = false;  // quantized to MXFP4 when the config says so
  bool fp8_eligible = false;   // a Linear weight stored F8_E4M3 + scales under FP8_BLOCK configs
  int64_t numel() const;
};

// The logical parameters of the model (before any quantization), in checkpoint order.
std::vector<tensor_decl> build_manifest(const formats::model_config& config);

// One stored tensor as it lands in the checkpoint (an MXFP4 weight becomes *_blocks and *_scales).
struct stored_tensor {
  std::string name;
  dtype type = dtype::BF16;
  std::vector<int64_t> shape;
  size_t decl_index = 0;  // index into the manifest
  enum class role : uint8_t { PLAIN, MX_BLOCKS, MX_SCALES, FP8_WEIGHT, FP8_SCALE_INV } kind = role::PLAIN;
  uint64_t nbytes() const;
};

// Storage layout of the manifest: MXFP4 for routed experts when config.quant is MXFP4 (U8 blocks
// [..., K/32, 16] + U8 scales [..., K/32], gpt-oss names `<weight>_blocks`/`<weight>_scales`), F8_E4M3 +
// F32 `<weight>_scale_inv` for FP8_BLOCK, and `float_type` (BF16 or F32) for everything else.
std::vector<stored_tensor> storage_layout(const formats::model_config& config,
                                          const std::vector<tensor_decl>& manifest, dtype float_type);

// Names of the MXFP4 pair for a weight name ("...w1.weight" -> "...w1.weight_blocks"/"..._scales").
std::string mx_blocks_name(const std::string& weight);
std::string mx_scales_name(const std::string& weight);

}  // namespace moxi::model
