// The AMX tile emulator (amx-emu.h): the SDM pseudo-code of LDTILECFG, TILERELEASE, TILEZERO, TILELOADD,
// TILESTORED and TDPBF16PS in scalar C++. Built without -m flags, so it runs on any x86-64 (and non-x86)
// CPU; its double-precision arithmetic is plain IEEE (the project builds without -ffast-math).
#include "moxi/kernels/x86/amx-emu.h"

#include <cmath>
#include <cstring>
#include <string>

#include "moxi/base/error.h"

namespace moxi::kernels::x86 {
namespace {

[[noreturn]] void fault(const char* insn, const std::string& why) {
  throw error(std::string("amx_emu: ") + insn + " would fault on the hardware: " + why);
}

// SDM make_fp32 (bf16 in the upper half of a dword) with DAZ: a bf16 denormal (exponent field 0) reads as
// a zero of its sign.
float bf16_daz(uint16_t v) {
  const uint32_t bits = (v & 0x7F80u) == 0 ? uint32_t(v & 0x8000u) << 16 : uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float f32_daz(float f) {
  return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f;
}

float ftz(float f) {
  return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f;
}

// One fp32 FMA, c + a * b rounded once to nearest even, with a and b bf16 values (<= 8 significant bits
// each). Their product is exact in double (<= 16 bits, exponent within double range), so the only
// roundings are the double sum and its conversion to float. That double rounding is harmless here: when
// the exponents of c and a*b are within 37 (c larger) or 29 (a*b larger) binades the exact sum has at most
// 53 significant bits and the double sum is exact; further apart, the smaller term is far below half a
// float ulp of the larger one, which no double rounding can carry to a float rounding boundary.
float fma_bf16(float c, float a, float b) {
  return ftz(float(double(a) * double(b) + double(c)));
}

// fp32 add, rounded once: the double sum of two floats rounded to float is the correctly rounded float
// sum (53 >= 2 * 24 + 2).
float add_f32(float a, float b) {
  return ftz(float(double(a) + double(b)));
}

}  // namespace

amx_emu::amx_emu() {
  tilerelease();
}

void amx_emu::ldtilecfg(const amx_tile_config& cfg) {
  if (cfg.palette_id == 0) {
    tilerelease();
    return;
  }
  if (cfg.palette_id != 1) fault("LDTILECFG", "palette " + std::to_string(cfg.palette_id) + " (#GP)");
  if (cfg.start_row != 0) fault("LDTILECFG", "start_row != 0 (this emulator has no restart)");
  for (uint8_t r : cfg.reserved)
    if (r != 0) fault("LDTILECFG", "reserved bytes 2..15 not zero (#GP)");
  for (int t = 0; t < 16; ++t) {
    const std::string name = "tmm" + std::to_string(t);
    if (t >= kAmxTiles) {
      if (cfg.rows[t] != 0 || cfg.colsb[t] != 0) fault("LDTILECFG", name + " configured in palette 1 (#GP)");
      continue;
    }
    if (cfg.rows[t] > kAmxMaxRows) fault("LDTILECFG", name + " rows > 16 (#GP)");
    if (cfg.colsb[t] > kAmxBytesPerRow) fault("LDTILECFG", name + " colsb > 64 (#GP)");
    if ((cfg.rows[t] == 0) != (cfg.colsb[t] == 0))
      fault("LDTILECFG", name + " has rows or colsb zero, not both");
  }
  cfg_ = cfg;
  configured_ = true;
  std::memset(data_, 0, sizeof(data_));
}

void amx_emu::tilerelease() {
  std::memset(&cfg_, 0, sizeof(cfg_));
  configured_ = false;
  std::memset(data_, 0, sizeof(data_));
}

namespace {

void check_tile(const char* insn, bool configured, const amx_tile_config& cfg, int t) {
  if (!configured) fault(insn, "tiles not configured (#UD)");
  if (t < 0 || t >= kAmxTiles) fault(insn, "tmm" + std::to_string(t) + " does not exist (#UD)");
  if (cfg.rows[t] == 0) fault(insn, "tmm" + std::to_string(t) + " not configured (#UD)");
}

}  // namespace

void amx_emu::tilezero(int t) {
  check_tile("TILEZERO", configured_, cfg_, t);
  std::memset(data_[t], 0, sizeof(data_[t]));
}

void amx_emu::tileloadd(int t, const void* base, int64_t stride) {
  check_tile("TILELOADD", configured_, cfg_, t);
  std::memset(data_[t], 0, sizeof(data_[t]));
  const auto* src = static_cast<const uint8_t*>(base);
  for (int r = 0; r < cfg_.rows[t]; ++r)
    std::memcpy(data_[t] + r * kAmxBytesPerRow, src + r * stride, cfg_.colsb[t]);
}

void amx_emu::tilestored(int t, void* base, int64_t stride) const {
  check_tile("TILESTORED", configured_, cfg_, t);
  auto* dst = static_cast<uint8_t*>(base);
  for (int r = 0; r < cfg_.rows[t]; ++r)
    std::memcpy(dst + r * stride, data_[t] + r * kAmxBytesPerRow, cfg_.colsb[t]);
}

void amx_emu::tdpbf16ps(int c, int a, int b) {
  const char* insn = "TDPBF16PS";
  check_tile(insn, configured_, cfg_, c);
  check_tile(insn, configured_, cfg_, a);
  check_tile(insn, configured_, cfg_, b);
  if (c == a || c == b || a == b) fault(insn, "tile operands not distinct (#UD)");
  for (int t : {a, b, c})
    if (cfg_.colsb[t] % 4 != 0) fault(insn, "tmm" + std::to_string(t) + " colsb not a multiple of 4 (#UD)");
  if (cfg_.rows[c] != cfg_.rows[a]) fault(insn, "C.rows != A.rows (#UD)");
  if (cfg_.colsb[c] != cfg_.colsb[b]) fault(insn, "C.colsb != B.colsb (#UD)");
  if (cfg_.colsb[a] / 4 != cfg_.rows[b]) fault(insn, "A.colsb / 4 != B.rows (#UD)");

  const int M = cfg_.rows[c], Kp = cfg_.colsb[a] / 4, Nc = cfg_.colsb[c] / 4;
  // B as fp32 with DAZ, once per instruction: bv[k][2n + j] = B[k].bf16[2n + j].
  float bv[kAmxMaxRows][kAmxBytesPerRow / 2];
  for (int k = 0; k < Kp; ++k) {
    const uint8_t* row = data_[b] + k * kAmxBytesPerRow;
    for (int i = 0; i < 2 * Nc; ++i) {
      uint16_t v;
      std::memcpy(&v, row + 2 * i, 2);
      bv[k][i] = bf16_daz(v);
    }
  }
  for (int m = 0; m < M; ++m) {
    float av[kAmxBytesPerRow / 2];
    for (int i = 0; i < 2 * Kp; ++i) {
      uint16_t v;
      std::memcpy(&v, data_[a] + m * kAmxBytesPerRow + 2 * i, 2);
      av[i] = bf16_daz(v);
    }
    float temp[kAmxBytesPerRow / 2] = {};
    for (int k = 0; k < Kp; ++k)
      for (int n = 0; n < Nc; ++n) {
        temp[2 * n] = fma_bf16(temp[2 * n], av[2 * k], bv[k][2 * n]);
        temp[2 * n + 1] = fma_bf16(temp[2 * n + 1], av[2 * k + 1], bv[k][2 * n + 1]);
      }
    uint8_t* crow = data_[c] + m * kAmxBytesPerRow;
    for (int n = 0; n < Nc; ++n) {
      float acc;
      std::memcpy(&acc, crow + 4 * n, 4);
      acc = add_f32(f32_daz(acc), add_f32(temp[2 * n], temp[2 * n + 1]));
      std::memcpy(crow + 4 * n, &acc, 4);
    }
    std::memset(crow + cfg_.colsb[c], 0, size_t(kAmxBytesPerRow - cfg_.colsb[c]));  // write_row_and_zero
  }
  std::memset(data_[c] + M * kAmxBytesPerRow, 0,
              size_t((kAmxMaxRows - M) * kAmxBytesPerRow));  // zero_upper_rows
}

}  // namespace moxi::kernels::x86
