// A scalar emulator of the AMX tile instructions the AMX-BF16 GEMM uses (LDTILECFG, TILERELEASE, TILEZERO,
// TILELOADD, TILESTORED, TDPBF16PS), written from the pseudo-code of the Intel SDM (Vol. 2, "Intel AMX
// Instruction Set Reference", and the AMX-E3/E4 exception classes; mirrored per instruction at
// https://www.felixcloutier.com/x86/tdpbf16ps and neighbours), so that the kernel body that runs on
// the hardware tiles can also run, unchanged, on CPUs without AMX (this project's machines): the tests run
// the GEMM through it everywhere (tests/kernels/mxfp4-amx-test.cpp, docs/kernels-mxfp4.md "AMX-BF16 GEMM").
//
// Plain C++, no -m flags, no intrinsics. Every member that does work is defined in amx-emu.cpp, the
// constructor too (only three one-load accessors are inline, for tests): translation units built with
// AVX-512/AMX flags include this header, and an inline function emitted there could be the copy the linker
// keeps for the baseline callers of the same function.
//
// What it proves and what not: the tile shapes, strides, the VNNI pair order and the row/column roles the
// kernel relies on are checked (an operation the hardware would fault on throws moxi::error naming the
// #UD/#GP condition), and the arithmetic is the SDM's. The SDM pseudo-code fixes one FMA order; whether
// silicon rounds exactly there is not architecturally promised (see tdpbf16ps), so results are compared
// with hardware by tolerance, never bit for bit.
#pragma once

#include <cstdint>

namespace moxi::kernels::x86 {

// The 64-byte LDTILECFG/STTILECFG memory format (SDM, LDTILECFG, "Table 3-10"): palette 1 has 8 tiles
// (tmm0..tmm7) of at most 16 rows x 64 bytes; entries 8..15 and the reserved bytes must be zero.
struct alignas(64) amx_tile_config {
  uint8_t palette_id;
  uint8_t start_row;
  uint8_t reserved[14];
  uint16_t colsb[16];  // bytes per row of each tile
  uint8_t rows[16];
};
static_assert(sizeof(amx_tile_config) == 64);

inline constexpr int kAmxTiles = 8;         // palette 1: max_names
inline constexpr int kAmxMaxRows = 16;      // palette 1: max_rows
inline constexpr int kAmxBytesPerRow = 64;  // palette 1: bytes_per_row

// One thread's tile state: the configuration and 8 tiles of 1 KiB. Each method is one instruction.
class amx_emu {
 public:
  amx_emu();  // unconfigured (as after TILERELEASE), all tile data zero

  // LDTILECFG: palette 0 releases (as TILERELEASE); palette 1 configures and zeroes every tile. Throws
  // where the SDM raises #GP: unknown palette, non-zero reserved bytes or start_row, rows > 16, colsb > 64,
  // a tile >= 8 configured. Also rejects a tile with exactly one of rows/colsb zero (never intended).
  void ldtilecfg(const amx_tile_config& cfg);
  // TILERELEASE: back to the unconfigured state, tile data zero.
  void tilerelease();
  // TILEZERO tmm[t]: all of the tile's 16 x 64 bytes zero.
  void tilezero(int t);
  // TILELOADD tmm[t], [base + r * stride]: rows[t] rows of colsb[t] bytes; the rest of each row and the
  // rows beyond rows[t] are zeroed (write_row_and_zero, zero_upper_rows).
  void tileloadd(int t, const void* base, int64_t stride);
  // TILESTORED [base + r * stride], tmm[t]: rows[t] rows of colsb[t] bytes.
  void tilestored(int t, void* base, int64_t stride) const;
  // TDPBF16PS tmm[c], tmm[a], tmm[b]. Throws on the AMX-E4 #UD conditions: unconfigured tiles, c/a/b not
  // distinct, colsb not a multiple of 4, C.rows != A.rows, C.colsb != B.colsb, A.colsb / 4 != B.rows.
  // Arithmetic (SDM pseudo-code): for each row m of C, two fp32 partial sums per column n, temp[2n] and
  // temp[2n+1], start at 0; for k = 0 .. A.colsb/4 - 1 (in order) temp[2n+j] += A[m].bf16[2k+j] *
  // B[k].bf16[2n+j] (j = 0, 1) as one fp32 FMA, rounded to nearest even; then C[m][n] += temp[2n] +
  // temp[2n+1] (two fp32 adds). Every step: input denormals (bf16 or fp32) read as zero (DAZ), denormal
  // results flushed to a signed zero (FTZ), MXCSR ignored. The FTZ test is applied after rounding to
  // fp32 with gradual underflow; results within half an ulp below 2^-126 are where that choice could
  // differ from silicon, a case the pseudo-code does not settle.
  void tdpbf16ps(int c, int a, int b);

  const amx_tile_config& config() const { return cfg_; }
  bool configured() const { return configured_; }
  const uint8_t* tile_bytes(int t) const { return data_[t]; }  // 16 x 64 bytes, row-major

 private:
  amx_tile_config cfg_;
  bool configured_;
  alignas(64) uint8_t data_[kAmxTiles][kAmxMaxRows * kAmxBytesPerRow];
};

}  // namespace moxi::kernels::x86
