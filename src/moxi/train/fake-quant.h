// QAT fake-quantization as an autograd op: the forward is moxi::mx::fake_quantize (the engine's own codec,
// so train-time and serve-time numerics agree bit for bit), the backward is straight-through.
#pragma once

#include <torch/torch.h>

#include "moxi/base/mx.h"

namespace moxi::train {

// x f32 [..., K] with K % 32 == 0: every 32-block of each row quantized to `format` and decoded again.
// Gradient: identity (straight-through estimator).
torch::Tensor mx_fake_quant(const torch::Tensor& x, mx::elem_format format);

// x f32 [..., D]: every row of the last dimension quantized to E4M3 with one power-of-two scale and decoded
// again (mx::fake_quantize_fp8_row: the engine's FP8 DSA index keys). Gradient: identity.
torch::Tensor fp8_row_fake_quant(const torch::Tensor& x);

// Decode MXFP4 storage (u8 blocks [N, K/32, 16], u8 scales [N, K/32]) to f32 [N, K] with
// mx::dequantize_mxfp4.
torch::Tensor mxfp4_decode(const uint8_t* blocks, const uint8_t* scales, int64_t N, int64_t K);

// Encode f32 [N, K] to MXFP4 storage with mx::quantize_mxfp4: {blocks u8 [N, K/32, 16], scales u8 [N, K/32]}.
std::pair<torch::Tensor, torch::Tensor> mxfp4_encode(const torch::Tensor& w);

}  // namespace moxi::train
