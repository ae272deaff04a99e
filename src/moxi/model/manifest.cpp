// Manifest helpers: group names, the registry hand-off, and the storage layout (which dtype and which
// extra tensors each logical parameter becomes on disk).
#include "moxi/model/manifest.h"

#include <array>

#include "moxi/base/error.h"
#include "moxi/model/arch/registry.h"

namespace moxi::model {

const char* param_group_name(param_group g) {
  static constexpr std::array<const char*, size_t(param_group::COUNT)> kNames = {
      "embedding",      "lm_head",     "final_norm",     "kda",       "mla_dsa",     "swa", "router",
      "routed_experts", "latent_proj", "shared_experts", "dense_mlp", "layer_norms", "mtp", "vision"};
  return kNames.at(size_t(g));
}

int64_t tensor_decl::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t stored_tensor::nbytes() const {
  uint64_t n = dtype_size(type);
  for (int64_t d : shape) n *= uint64_t(d);
  return n;
}

std::vector<tensor_decl> build_manifest(const formats::model_config& config) {
  return arch::find_architecture(config).manifest(config);
}

std::string mx_blocks_name(const std::string& weight) {
  return weight + "_blocks";
}
std::string mx_scales_name(const std::string& weight) {
  return weight + "_scales";
}

std::vector<stored_tensor> storage_layout(const formats::model_config& config,
                                          const std::vector<tensor_decl>& manifest, dtype float_type) {
  MOXI_ASSERT(float_type == dtype::BF16 || float_type == dtype::F32 || float_type == dtype::F16);
  using formats::quant_method;
  const bool mxfp4 = config.quant && config.quant->method == quant_method::MXFP4;
  const bool fp8 = config.quant && config.quant->method == quant_method::FP8_BLOCK;
  std::vector<stored_tensor> out;
  out.reserve(manifest.size() + 16);
  for (size_t i = 0; i < manifest.size(); ++i) {
    const tensor_decl& d = manifest[i];
    if (mxfp4 && d.routed_expert) {
      MOXI_ASSERT(d.shape.size() == 2 && d.shape[1] % 32 == 0,
                  "MXFP4 weights are [out, in] with in % 32 == 0");
      const int64_t rows = d.shape[0], blocks = d.shape[1] / 32;
      out.push_back(
          {mx_blocks_name(d.name), dtype::U8, {rows, blocks, 16}, i, stored_tensor::role::MX_BLOCKS});
      out.push_back({mx_scales_name(d.name), dtype::U8, {rows, blocks}, i, stored_tensor::role::MX_SCALES});
    } else if (fp8 && d.fp8_eligible) {
      // DeepSeek FP8 checkpoints: F8_E4M3 weight plus F32 weight_scale_inv per [128, 128] block.
      const auto& bs = config.quant->weight_block_size;
      const int64_t r = (d.shape[0] + bs[0] - 1) / bs[0], c = (d.shape[1] + bs[1] - 1) / bs[1];
      out.push_back({d.name, dtype::F8_E4M3, d.shape, i, stored_tensor::role::FP8_WEIGHT});
      out.push_back({d.name + "_scale_inv", dtype::F32, {r, c}, i, stored_tensor::role::FP8_SCALE_INV});
    } else {
      out.push_back({d.name, d.fp32 ? dtype::F32 : float_type, d.shape, i, stored_tensor::role::PLAIN});
    }
  }
  return out;
}

}  // namespace moxi::model
