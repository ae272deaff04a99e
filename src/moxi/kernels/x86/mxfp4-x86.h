// The packed MXFP4 weight layout shared by the x86 kernels, and their entry points. Plain C++ (no
// intrinsics) so the baseline x86 backend code can include it; the kernels themselves live in translation
// units built with their own -m flags and are only called after kernels::x86::cpu() says the CPU has those
// features.
//
// Packed layout ("panel-16"), built once at load by kernels::pack_mxfp4: rows are grouped in panels of 16
// (the last panel zero-padded). For panel P, group g of 8 consecutive elements (k = 8g .. 8g + 7) and row r
// of the panel, one little-endian 32-bit word holds the 8 E2M1 codes:
//   word[(P * K/8 + g) * 16 + r] = sum over j < 4 of code(8g + 2j) << 4j | code(8g + 2j + 1) << (16 + 4j)
//   sc[(P * K/32 + b) * 16 + r]  = E8M0 scale of block b of row 16P + r
// so the low half of a row's word holds the even elements of K-pairs 4g .. 4g + 3 (nibble j = pair 4g + j)
// and the high half their odd elements. 64 bytes are 4 K-pairs of 16 rows, a panel's weights stream
// contiguously, and the codes of K-pair 4g + j reach the low 4 bits of each 16-bit half by ONE shift of the
// loaded words by 4j: a 16-bit table lookup (VPERMW) then yields each row's (even, odd) bf16 pair in the
// order VDPBF16PS pairs them, and a 32-bit one (VPERMPS) on shifts by 4j and 16 + 4j the exact fp32
// weights. Only shifts and lookups, no byte shuffles: 4.25 bits per weight, as in the checkpoint.
#pragma once

#include <cstdint>

namespace moxi::kernels::x86 {

inline constexpr int64_t kPanel = 16;

struct mxfp4_panels {
  const uint8_t* qs;  // u8 [panels, K/8, 16, 4]: the 32-bit words above
  const uint8_t* sc;  // u8 [panels, K/32, 16]
  int64_t N, K;       // logical rows and columns (K % 32 == 0)
  int64_t panels() const { return (N + kPanel - 1) / kPanel; }
};

// Where element k's code sits in its row's word: bit 4 * ((k % 8) / 2) + 16 * (k % 2).
inline int mxfp4_code_shift(int64_t k) {
  return int(4 * ((k & 7) >> 1) + 16 * (k & 1));
}
// The E2M1 code of element k of row 16P + r (scalar; the pack, the emulator's decode and the tests).
inline uint8_t mxfp4_panel_code(const mxfp4_panels& w, int64_t P, int64_t r, int64_t k) {
  const int s = mxfp4_code_shift(k);
  return uint8_t((w.qs[((P * (w.K / 8) + k / 8) * 16 + r) * 4 + s / 8] >> (s % 8)) & 0xF);
}

// ---- AVX-512 F/BW/VL/DQ (mxfp4-gemv-avx512.cpp) ----
// y[t, rows of panels [p0, p1)] = x[t] . W^T for t < T <= 4 (x f32 [T, K], y f32 [T, N], row strides K
// and N). Weights decode to exact fp32 (vpermps LUT), products are exact, block sums are scaled by the
// exact E8M0 factor: only the fp32 summation order differs from the reference.
inline constexpr int64_t kGemvMaxTokens = 4;
void mxfp4_gemv_avx512(const float* x, int64_t T, const mxfp4_panels& w, int64_t p0, int64_t p1, float* y);

// ---- AVX-512 BF16 (mxfp4-gemm-avx512bf16.cpp) ----
// x f32 [n] -> bf16 [n] (round to nearest even), n % 16 == 0.
void f32_to_bf16_avx512bf16(const float* x, uint16_t* out, int64_t n);
// Register-resident VDPBF16PS loop for the benchmark's compute ceiling: iters x 24 instructions of
// 16 x 2 multiply-adds (1536 flop per iteration); returns a value that depends on every result.
double avx512bf16_peak_loop(int64_t iters);
// The GEMV of mxfp4_gemv_avx512 on bf16 activations (xb bf16 [T, K], T <= 4): per 16 rows x K-pair one
// shift, one VPERMW (exact bf16 weights) and one VDPBF16PS per token; block sums scaled exactly in fp32.
void mxfp4_gemv_avx512bf16(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t p0, int64_t p1,
                           float* y);
// Scratch the GEMM needs per thread, in uint32 units.
int64_t mxfp4_gemm_scratch_u32();
// y[T, rows of panel pairs [pp0, pp1)] = xb . W^T with xb bf16 [T, K] (from f32_to_bf16_avx512bf16); panel
// pair pp holds panels 2pp and 2pp+1. Weights decode (scale folded in, exact) into bf16 pairs in scratch,
// VDPBF16PS accumulates in fp32. Any T >= 1.
void mxfp4_gemm_avx512bf16(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t pp0, int64_t pp1,
                           float* y, uint32_t* scratch);

// ---- AMX-BF16 (mxfp4-gemm-amx.cpp; body in mxfp4-gemm-amx.h, emulated twin in mxfp4-gemm-amx-emu.cpp) ----
// The AMX GEMMs read x in whole 16-token tiles: xb holds T rounded up to this, the padding rows zero, in
// tile order: each 16-token x 32-element block is one A tile, 1 KiB contiguous (row stride 64 bytes), so a
// tile load reads 16 consecutive cache lines instead of 16 rows 2K bytes apart (row-major x put all of
// them in two L1 sets once K is a multiple of 2048 bytes' worth, and the loads stalled on the conflicts).
inline constexpr int64_t kAmxTokenPad = 16;
// Where element (t, k) of x [T, K] sits in the tile order (K % 32 == 0).
inline int64_t amx_tile_offset(int64_t t, int64_t k, int64_t K) {
  return ((t / 16) * (K / 32) + k / 32) * 512 + (t % 16) * 32 + k % 32;
}
// Scratch the AMX GEMM needs per thread (its decoded weights), in uint32 units.
int64_t mxfp4_gemm_amx_scratch_u32();
// As mxfp4_gemm_avx512bf16 (same panel pairs, same bf16 activations but in tile order, amx_tile_offset,
// T padded to kAmxTokenPad; exact bf16 weights) on AMX tiles: TDPBF16PS on 16 x 32 bf16 x-tiles and 16-pair x
// 16-row weight tiles into 16 x 16 fp32 y-tiles. Needs cpu().amx_bf16 (and AVX512-BF16 for its weight
// decode); configures and releases the calling thread's tiles.
void mxfp4_gemm_amx(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t pp0, int64_t pp1, float* y,
                    uint32_t* scratch);
// The same kernel with its tile instructions run by the scalar emulator (amx-emu.h), for tests on CPUs
// without AMX: with the hardware path's AVX-512 weight decode (needs AVX512-BF16) ...
void mxfp4_gemm_amx_emulated(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t pp0, int64_t pp1,
                             float* y, uint32_t* scratch);
// ... or with a scalar decode, bit-identical to it (any CPU).
void mxfp4_gemm_amx_emulated_scalar(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t pp0,
                                    int64_t pp1, float* y, uint32_t* scratch);
// ---- Dense BF16 panels on AMX-BF16 (matmul-bf16-amx in mxfp4-gemm-amx.cpp, scalar twin in -emu.cpp) ----
// Dense weights in the x86 backends' panel layout (ref::bf16_panel_index: element (n, k) of panel P = n / 16
// at (P * K + k - k % 2) * 16 + (n % 16) * 2 + k % 2 for an even K, rows past N zero).
struct bf16_panels {
  const uint16_t* w;
  int64_t N, K;
  int64_t panels() const { return (N + kPanel - 1) / kPanel; }
};
// The dense AMX GEMM runs on activations split into three bf16 terms, x = hi + lo + lo2 exactly for every
// finite fp32 x with |x| >= 2^-100: hi = bf16(x), lo = bf16(x - hi), lo2 = bf16(x - hi - lo) (round to
// nearest even; each difference is exact in fp32 and the last one has at most 8 significant bits; below
// 2^-100 a term would be subnormal, which the conversion flushes to zero: an absolute error < 2^-126).
// With exact BF16 weights every product w * term is exact in fp32, so the three tile products sum to
// x . w within fp32 rounding, like the FMA kernels, not to BF16 precision. n % 16 == 0.
inline constexpr int kDenseSplits = 3;
void split_bf16x3_avx512bf16(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, uint16_t* lo2);
void split_bf16x3_scalar(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, uint16_t* lo2);
// y[T, rows of panel pairs [pp0, pp1)] = x . W^T, xs = the three terms, each bf16 [Tpad, K] in tile order
// (amx_tile_offset; Tpad = T rounded up to kAmxTokenPad, padding rows zero), Tpad * K elements apart; K % 32
// == 0; no bias. The MXFP4 AMX GEMM's body (mxfp4-gemm-amx.h), its B tiles loaded from the panels as stored
// (a K-pair of a panel is a B-tile row) and three TDPBF16PS per tile step; no scratch (nothing to decode).
void matmul_bf16p_amx(const uint16_t* xs, int64_t T, const bf16_panels& w, int64_t pp0, int64_t pp1, float* y);
// The same on the tile emulator with a scalar decode (any CPU), for the tests.
void matmul_bf16p_amx_emulated_scalar(const uint16_t* xs, int64_t T, const bf16_panels& w, int64_t pp0,
                                      int64_t pp1, float* y);
// x f32 [n] -> bf16 [n] as VCVTNEPS2BF16 does it (SDM: RNE, denormals to signed zero, NaN quieted), in
// scalar code: bit-identical to f32_to_bf16_avx512bf16, for the emulated path on any CPU.
void f32_to_bf16_scalar(const float* x, uint16_t* out, int64_t n);
// Register-resident TDPBF16PS loop for the benchmark's compute ceiling on AMX CPUs: iters x 6 tile
// multiplies of 16 x 16 x 32 multiply-adds (98,304 flop per iteration); returns a value that depends on
// every result. Needs cpu().amx_bf16.
double amx_bf16_peak_loop(int64_t iters);

}  // namespace moxi::kernels::x86
