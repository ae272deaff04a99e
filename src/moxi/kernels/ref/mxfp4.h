// Scalar reference MXFP4-weight matmul (gpt-oss block layout), with optional MXFP8 fake-quantization of
// the activations: the twin every fast MXFP4 kernel (kernels/x86, later CUDA) is tested against.
#pragma once

#include <cstdint>

namespace moxi::kernels::ref {

// How activations are quantized before the matmul. NONE keeps fp32; the MXFP8 modes reproduce the
// engine's activation quantization (each 32-block of a row fake-quantized with moxi::mx::fake_quantize).
enum class act_quant : uint8_t { NONE, MXFP8_E4M3, MXFP8_E5M2 };

// y[T,N] = x[T,K] . W[N,K]^T, W in MXFP4 gpt-oss layout: blocks u8 [N, K/32, 16] (element 2j in the low
// nibble of byte j), scales u8 [N, K/32] (E8M0). With act != NONE every 32-block of each x row is first
// fake-quantized to MXFP8 with moxi::mx::fake_quantize (the engine's activation quantization). K % 32 == 0.
//
// Numerics: W is decoded exactly as mx::dequantize_mxfp4 decodes it (kFp4[code] * kE8m0[scale]) and each
// output is summed in input order with one fp32 accumulator, so the result is bit-identical to
// ref::matmul on the dequantized (and, with act != NONE, fake-quantized) operands. x and y must not alias.
void matmul_mxfp4(const float* x,         // f32 [T, K]
                  const uint8_t* blocks,  // u8 [N, K/32, 16]
                  const uint8_t* scales,  // u8 [N, K/32], E8M0
                  float* y,               // f32 [T, N]
                  int64_t T, int64_t N, int64_t K, act_quant act);

}  // namespace moxi::kernels::ref
