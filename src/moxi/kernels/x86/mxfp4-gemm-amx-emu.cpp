// The AMX-BF16 GEMM body (mxfp4-gemm-amx.h) on the tile emulator (amx-emu.h) with a scalar weight decode
// and a scalar SDM bf16 conversion: the twin of the hardware path that runs on any CPU, so the kernel's
// tiling and tile layout are tested where there is neither AMX nor AVX-512. Built without -m flags.
#include <cstring>

#include "moxi/base/mx.h"
#include "moxi/kernels/x86/amx-emu.h"
#include "moxi/kernels/x86/mxfp4-gemm-amx.h"
#include "moxi/kernels/x86/mxfp4-x86.h"

namespace moxi::kernels::x86 {
namespace {

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The AVX-512 decode's arithmetic in scalar form: E2M1 value x E8M0 scale in fp32 (mx::kFp4, mx::kE8m0:
// exactly ref::matmul_mxfp4's weights), bf16 = upper half (exact: <= 2 significant bits; scale bytes < 3
// give fp32 subnormals whose bf16 is a subnormal that TDPBF16PS reads as zero, like the hardware path).
struct scalar_decode {
  static void panel(const mxfp4_panels& w, int64_t P, int64_t kc, int64_t kn, uint32_t* out, int64_t stride) {
    const int64_t nb = w.K / 32;
    for (int64_t p = kc / 2; p < (kc + kn) / 2; ++p) {
      const uint8_t* s = w.sc + (P * nb + p / 16) * 16;
      for (int r = 0; r < 16; ++r) {
        const float scale = mx::kE8m0[s[r]];
        const uint32_t lo = f32_bits(mx::kFp4[mxfp4_panel_code(w, P, r, 2 * p)] * scale),
                       hi = f32_bits(mx::kFp4[mxfp4_panel_code(w, P, r, 2 * p + 1)] * scale);
        out[r] = (lo >> 16) | (hi & 0xFFFF0000u);
      }
      out += stride;
    }
  }
};

// SDM VCVTNEPS2BF16 convert_fp32_to_bfloat16: zero or denormal -> signed zero, infinity kept, NaN
// truncated and quieted (bit 6), normal numbers rounded to nearest even by adding 0x7FFF + lsb.
uint16_t f32_to_bf16_sdm(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t exp = (x >> 23) & 0xFF, frac = x & 0x7FFFFF;
  if (exp == 0) return uint16_t((x >> 31) << 15);
  if (exp == 0xFF) return uint16_t((x >> 16) | (frac != 0 ? 0x40u : 0u));
  return uint16_t((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

}  // namespace

int64_t mxfp4_gemm_amx_scratch_u32() {
  return kAmxDecodeU32;
}

void f32_to_bf16_scalar(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16_sdm(x[i]);
}

void split_bf16x3_scalar(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, uint16_t* lo2) {
  const auto widen = [](uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  for (int64_t i = 0; i < n; ++i) {
    hi[i] = f32_to_bf16_sdm(x[i]);
    const float r1 = x[i] - widen(hi[i]);
    lo[i] = f32_to_bf16_sdm(r1);
    lo2[i] = f32_to_bf16_sdm(r1 - widen(lo[i]));
  }
}

void matmul_bf16p_amx_emulated_scalar(const uint16_t* xs, int64_t T, const bf16_panels& w, int64_t pp0,
                                      int64_t pp1, float* y) {
  const int64_t Tp = (T + kAmxTokenPad - 1) / kAmxTokenPad * kAmxTokenPad;
  amx_emu emu;
  emu_tiles tl{emu};
  amx_gemm<dense_weights, kDenseSplits>(tl, xs, T, w, pp0, pp1, y, nullptr, Tp * w.K);
}

void mxfp4_gemm_amx_emulated_scalar(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t pp0,
                                    int64_t pp1, float* y, uint32_t* scratch) {
  amx_emu emu;
  emu_tiles tl{emu};
  amx_gemm<decoded<scalar_decode>>(tl, xb, T, w, pp0, pp1, y, scratch);
}

}  // namespace moxi::kernels::x86
