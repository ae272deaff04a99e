// The x86 backends' MXFP4-weight matmul: weights packed once at load (`pack_mxfp4`, through
// backend::pack_mxfp4), then `matmul_mxfp4` runs the kernel of the pack's variant on the global thread pool.
// Decode (few tokens) takes the memory-bound GEMV, prefill the BF16 GEMM (on AMX tiles where the CPU has
// them). Each variant is one registered backend (x86/backend.cpp), named as to_string() names it.
//
// Variants and numerics against ref::matmul_mxfp4 (docs/kernels-mxfp4.md):
//   REF          the scalar reference itself (bit-identical).
//   AVX512       fp32 GEMV for every T (in groups of 4 tokens): exact weights, exact products, exact block
//                scales; only the fp32 summation order differs.
//   AVX512_BF16  a BF16 GEMV (VDPBF16PS) for T <= gemv_max_tokens, else the BF16 GEMM: weights exact in
//                bf16, x rounded to bf16 (RNE), exact products, fp32 accumulation. With MXFP8 activations x
//                is already exact in bf16, so only the summation order differs.
//   AMX_BF16     the AVX512_BF16 GEMV for T <= gemv_max_tokens (the tiles do not pay for a few tokens),
//                else the AMX-BF16 GEMM (TDPBF16PS tiles): the same numerics as the BF16 GEMM (x rounded
//                to bf16, exact weights and products, fp32 accumulation in another order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moxi/kernels/backend.h"
#include "moxi/kernels/ref/mxfp4.h"

namespace moxi::kernels::x86 {

using ref::act_quant;

enum class mxfp4_variant : uint8_t { REF, AVX512, AVX512_BF16, AMX_BF16 };

const char* to_string(mxfp4_variant v);

// Whether this CPU (and OS) can run the variant. REF always can.
bool mxfp4_supported(mxfp4_variant v);

// Weights in the layout of one variant, built once at load; opaque to callers. Movable, not copyable.
class packed_mxfp4 final : public packed_weights {
 public:
  packed_mxfp4() = default;
  packed_mxfp4(packed_mxfp4&&) = default;
  packed_mxfp4& operator=(packed_mxfp4&&) = default;

  int64_t rows() const { return n_; }  // N
  int64_t cols() const { return k_; }  // K
  mxfp4_variant variant() const { return variant_; }
  size_t bytes() const override { return qs_.size() + sc_.size(); }

 private:
  friend packed_mxfp4 pack_mxfp4(const uint8_t*, const uint8_t*, int64_t, int64_t, mxfp4_variant);
  friend struct mxfp4_access;
  int64_t n_ = 0, k_ = 0;
  mxfp4_variant variant_ = mxfp4_variant::REF;
  std::vector<uint8_t> qs_, sc_;  // REF: the gpt-oss blocks/scales as given; x86: the panel-16 layout
};

// blocks u8 [N, K/32, 16], scales u8 [N, K/32] as in ref::matmul_mxfp4; K % 32 == 0. Throws moxi::error
// for an unsupported variant.
packed_mxfp4 pack_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t N, int64_t K,
                        mxfp4_variant variant);

struct mxfp4_options {
  int64_t gemv_max_tokens =
      4;  // AVX512_BF16, AMX_BF16: T up to this takes the GEMV, above it the GEMM (0: always GEMM)
};

// y[T, N] = x[T, K] . W^T with the activation quantization of ref::matmul_mxfp4. x and y must not alias.
void matmul_mxfp4(const float* x,  // f32 [T, K]
                  const packed_mxfp4& w,
                  float* y,  // f32 [T, N]
                  int64_t T, act_quant act, const mxfp4_options& opt = {});

namespace detail {

// Where the AMX-BF16 GEMM's tile instructions run.
enum class amx_tiles : uint8_t {
  HARDWARE,         // the CPU's tiles (needs mxfp4_supported(AMX_BF16))
  EMULATED,         // x86/amx-emu (SDM semantics in scalar C++), with the hardware path's AVX-512 weight
                    // decode and bf16 conversion (needs mxfp4_supported(AVX512_BF16))
  EMULATED_SCALAR,  // the emulator with a scalar decode and conversion, bit-identical to EMULATED: any CPU
};

// Test hook: the GEMM path matmul_mxfp4 takes for AMX_BF16 weights (activation quantization, bf16
// rounding, token padding, panel pairs split over the pool), for any T >= 1, on the given tiles. Weights
// in the checkpoint layout are packed per call. Throws moxi::error if the tiles need what the CPU lacks.
void matmul_mxfp4_amx(const float* x, const uint8_t* blocks, const uint8_t* scales, float* y, int64_t T,
                      int64_t N, int64_t K, act_quant act, amx_tiles tiles);

// Dense BF16 weights in the panel layout (ref::bf16_panel_index) on AMX tiles, in blocks of
// kDenseAmxBlockTokens tokens: a block's x split into three exact bf16 terms (mxfp4-x86.h, over the pool by
// elements; this thread keeps that split, 3 x block x K bf16, as its scratch), panel pairs split over the
// pool, bias added per row; every output within fp32 rounding of x . w. K % 32 == 0; EMULATED is taken as
// EMULATED_SCALAR. The x86 AMX backend's path for T >= its threshold, and the tests' hook. Throws moxi::error
// if the tiles need what the CPU lacks.
inline constexpr int64_t kDenseAmxBlockTokens = 256;
void matmul_bf16_panels_amx(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T,
                            int64_t N, int64_t K, amx_tiles tiles);

}  // namespace detail

}  // namespace moxi::kernels::x86
