// The YaRN parameters of a config's RoPE (docs/deepseek.md: MLA's decoupled RoPE; sliding-window layers use
// the same fields), for ref::rope_inv_freq and the yarn_* factors. Shared by the engine's layers and the
// trainer so both build the same tables.
#pragma once

#include "moxi/formats/model-config.h"
#include "moxi/kernels/ref/mla.h"

namespace moxi::model {

inline kernels::ref::YarnConfig yarn_of(const formats::rope_config& r) {
  kernels::ref::YarnConfig y;
  y.theta = r.theta;
  y.factor = r.yarn ? r.factor : 1.0;
  y.original_max_position = double(r.original_max_position_embeddings);
  y.beta_fast = r.beta_fast;
  y.beta_slow = r.beta_slow;
  y.mscale = r.mscale;
  y.mscale_all_dim = r.mscale_all_dim;
  return y;
}

}  // namespace moxi::model
