// `moxi quantize`: convert a BF16/F32 checkpoint to the MXFP4 layout (routed experts as U8 *_blocks and
// *_scales, everything else kept byte for byte), streaming one tensor at a time.
#pragma once

#include <string>

#include "moxi/formats/model-config.h"

namespace moxi::model {

struct quantize_options {
  int num_shards = 0;                                                 // 0: as many shards as the input
  formats::act_format activations = formats::act_format::MXFP8_E4M3;  // written to quantization_config
  bool show_progress = true;
};

struct quantize_report {
  int64_t quantized_tensors = 0;  // routed expert weights converted
  int64_t copied_tensors = 0;     // kept as they were
  uint64_t bytes_in = 0, bytes_out = 0;
};

// Refuses an input that is already quantized (a quantization_config, or *_blocks tensors) and a model
// without routed experts. Nothing appears at out_dir unless the whole conversion succeeds.
quantize_report quantize_checkpoint(const std::string& in_dir, const std::string& out_dir,
                                    const quantize_options& options);

}  // namespace moxi::model
