// `moxi init`: a random-weight checkpoint of any config, with the architecture's HF tensor names,
// properly scaled initial values, and routed experts stored in MXFP4 when the config says so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "moxi/formats/model-config.h"
#include "moxi/model/manifest.h"
#include "moxi/tensor/dtype.h"

namespace moxi::model {

struct init_options {
  uint64_t seed = 0;
  int num_shards = 1;
  dtype float_type = dtype::BF16;  // BF16 or F32 for the unquantized tensors
  bool show_progress = true;
  // Only this group's tensors (a partial checkpoint, e.g. the vision tower alone for `moxi bench vision`);
  // unset: the whole manifest.
  std::optional<param_group> only_group;
};

// Values depend only on (seed, tensor name), never on the shard count. Writes config.json next to the
// shards; the directory appears only when complete.
void init_checkpoint(const formats::model_config& config, const std::string& out_dir,
                     const init_options& options);

// The initial values of one manifest tensor (exposed for tests).
void init_values(const formats::model_config& config, const tensor_decl& decl, uint64_t seed, float* out);

}  // namespace moxi::model
