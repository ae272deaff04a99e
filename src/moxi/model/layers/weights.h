// Loading layer weights from a checkpoint, transformed once (docs/design.md §2): float tensors are
// converted to f32 at load (where the active kernel backend keeps BF16 weights, BF16 Linear weights stay
// BF16: half the bytes a decode step streams, widened exactly in registers; in 16-row panels where the
// backend packs them), MXFP4 routed experts stay in the checkpoint's mapping and are also packed once in the
// backend's layout where it has one. Every matmul runs on kernels::active(), the scalar reference under
// MOXI_KERNELS=ref or a kernels::backend_scope of it.
// Also the named-intermediate dump hook every layer writes into.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moxi/formats/checkpoint.h"
#include "moxi/formats/model-config.h"
#include "moxi/kernels/backend.h"
#include "moxi/model/parallel.h"

namespace moxi::model {

// A Linear layer y = x W^T, W [out, in] as HF stores it: f32, or (a backend that keeps BF16 weights, BF16
// checkpoint) bf16 bits.
// Both give the same products: bf16 widens to f32 exactly.
struct linear {
  std::vector<float> w;      // f32 [out, in], or empty when wb holds the weights
  std::vector<uint16_t> wb;  // bf16 [out, in], or in 16-row panels when `panels`, or empty
  int64_t out = 0, in = 0;
  bool panels = false;  // wb in kernels::ref's 16-row panel layout (the backend's packs_bf16_panels)
  // y f32 [T, out] from x f32 [T, in] (+ bias f32 [out] or null); y must not alias x.
  void apply(const float* x, float* y, int64_t T, const float* bias = nullptr) const;
  bool empty() const { return w.empty() && wb.empty(); }
  // Row n of W as f32 [in] (an embedding lookup).
  void row(int64_t n, float* dst) const;
  // Moves bf16 row-layout weights into the panel layout (no-op for f32 or already packed weights).
  void pack_panels();
};

// Linear layers that read the same input stacked into one [sum of outs, in] matrix, so a decode step streams
// them in one GEMV (one pool job, no serial small GEMVs) instead of one each, as vLLM's fused QKV linear.
// Part i of each output row is columns [offset[i], offset[i+1]). Bit-identical to the parts applied one by
// one in the stack's layout (bf16 parts in panels if any part was, as a loaded model's all are; f32 rows if
// any part is f32): every output row's dot product is computed alone, in the same order, wherever the row
// sits.
struct stacked_linear {
  linear all;
  std::vector<int64_t> offset;  // parts + 1 column offsets into a row of `all`'s output
  // Moves the parts' weights into the stack (the parts are left empty). All parts must have the same `in`;
  // bf16 parts are widened (exactly) when some part is f32.
  static stacked_linear stack(const std::vector<linear*>& parts);
  int64_t width(size_t i) const { return offset[i + 1] - offset[i]; }
  // y f32 [T, all.out]; then part(i) of row t is y + t * all.out + offset[i].
  void apply(const float* x, float* y, int64_t T) const { all.apply(x, y, T); }
  // Copies part i of rows [0, T) of y into dst f32 [T, width(i)].
  void extract(const float* y, int64_t T, size_t i, float* dst) const;
};

// How the MXFP4 GEMMs quantize their input rows (docs/model-spec.md §4: activations MXFP8 E4M3 per 32-block).
using act_quant = kernels::act_quant;

// One routed-expert matrix (kernels/backend.h): f32, or MXFP4 in the checkpoint mapping (valid while the
// checkpoint lives; the model keeps it open) with the loading backend's pack.
using expert_matrix = kernels::expert_matrix;

struct load_options {
  // Decode MXFP4 routed experts to f32 at load instead of keeping them packed (the reference the packed
  // path is tested against; also what a kernel without MXFP4 support would need).
  bool dequantize_experts = false;
  // One rank of a multi-process layout (model/parallel.h), or null for the whole model in this process.
  // The rank loads only its pipeline stage's layers, its tensor-parallel slices and its experts.
  std::shared_ptr<const parallel_layout> parallel;
};

// Reads named tensors with their expected shapes; every error names the checkpoint and the tensor.
class weight_loader {
 public:
  weight_loader(const formats::checkpoint& ckpt, const formats::model_config& config, load_options opts)
      : ckpt_(ckpt), config_(config), opts_(opts) {}

  // A float tensor (F32/F16/BF16/F8 with its FP8_BLOCK scale_inv) converted to f32.
  std::vector<float> f32(const std::string& name, const std::vector<int64_t>& shape);
  // prefix + ".weight"; need_f32: keep f32 even where BF16 storage would do (weights read elementwise).
  linear lin(const std::string& prefix, int64_t out, int64_t in, bool need_f32 = false);
  // A routed-expert weight stored MXFP4 (name_blocks/name_scales) or as a float tensor.
  expert_matrix expert(const std::string& name, int64_t N, int64_t K);

  // The config the layers are built from: with tensor parallelism, the rank's local_config (heads and FFN
  // widths divided by tp); shapes asked of f32/lin are this rank's, and tensors that tp_split_axis names
  // are read as this rank's slice of the checkpoint's whole tensor.
  const formats::model_config& config() const { return config_; }
  const load_options& options() const { return opts_; }
  int tp() const { return opts_.parallel ? opts_.parallel->sizes.tp : 1; }
  // The routed experts this rank holds: [first, first + count).
  std::pair<int64_t, int64_t> experts(int64_t num_experts) const;
  // Every tensor name read so far (for the manifest consistency test).
  const std::set<std::string>& names_read() const { return read_; }
  // Checkpoint bytes read so far: whole tensors, or this rank's slices and experts (docs/distributed.md).
  uint64_t bytes_read() const { return bytes_; }

 private:
  // Checks the checkpoint's shape (the whole tensor: shape with the split axis times tp) and returns the
  // split axis when this rank reads a slice.
  std::optional<int> find(const std::string& name, const std::vector<int64_t>& shape) const;
  std::string where() const;

  const formats::checkpoint& ckpt_;
  const formats::model_config& config_;
  load_options opts_;
  std::set<std::string> read_;
  uint64_t bytes_ = 0;
};

// Receives named intermediates during forward ("layers.3.attn_out", f32, row-major).
struct dump_sink {
  std::function<bool(std::string_view name)> wants;
  std::function<void(const std::string& name, const std::vector<int64_t>& shape, const float* data)> put;
};

// Writes data under name when the sink is set and wants it; the copy happens only then.
inline void dump(const dump_sink* sink, const std::string& name, const std::vector<int64_t>& shape,
                 const float* data) {
  if (sink && sink->wants(name)) sink->put(name, shape, data);
}

act_quant activation_quant(const formats::model_config& config);

}  // namespace moxi::model
