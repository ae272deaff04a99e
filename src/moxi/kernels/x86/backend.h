// The x86 backends (x86/backend.cpp): AVX-512 ops for everything the contract has fast code for, one
// backend per MXFP4 variant ("avx512", "avx512_bf16", "amx_bf16"; they differ only in the MXFP4 GEMV/GEMM),
// registered after the reference in kernels/backend.cpp. Empty on other architectures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "moxi/base/mx.h"
#include "moxi/kernels/backend.h"
#include "moxi/kernels/x86/mxfp4-matmul.h"

namespace moxi::kernels::x86 {

// In order of preference.
std::span<const backend* const> backends();

// The MXFP4 variant an x86 backend runs (benchmarks pack for it); REF for any other backend.
mxfp4_variant mxfp4_variant_of(const backend& b);

// Tokens from which this backend runs dense BF16 panel products on AMX tiles (detail::matmul_bf16_panels_amx:
// another summation order than its FMA kernel, within fp32 rounding of it); int64 max where it never does.
// Below it a token's output is bit for bit the same whatever else is in the product; at or above it too,
// among products that all run on tiles.
int64_t dense_tile_min_tokens(const backend& b);

// mx::fake_quantize(f, x, n, out) with the AVX-512 twin for the FP8 formats where the CPU has AVX-512
// (bit-identical: block scales by mx::block_scale, the elements' RNE rounding in vector form), else
// mx::fake_quantize itself. The MXFP4 GEMV and GEMM quantize their inputs with it.
void fake_quantize(mx::elem_format f, const float* x, size_t n, float* out);

// The dense BF16 matmul on the row layout (matmul_bf16's kernel), for the benchmark that times it beside the
// panel layout the backends keep dense weights in; an AVX-512 CPU only. All T tokens, all N outputs, on
// the global pool as matmul_bf16 splits it.
void matmul_bf16_rows(const float* x, const uint16_t* w, float* y, int64_t T, int64_t N, int64_t K);
// Register-resident fp32 FMA loop for the benchmark's compute ceiling of the dense kernels: iters x 24
// VFMADD of 16 lanes (768 flop per iteration); returns a value that depends on every result.
double fma_f32_peak_loop(int64_t iters);

}  // namespace moxi::kernels::x86
