// x86 MXFP4 matmul: packing into the panel-16 layout, activation quantization and
// bf16 conversion into grow-only per-thread scratch, and static partitioning of weight panels over the
// global thread pool (each thread writes disjoint rows of y, so results do not depend on the schedule).
// The AVX512_BF16 and AMX_BF16 GEMMs share one driver (run_bf16_gemm); the AMX one can also run on the
// tile emulator (detail::matmul_mxfp4_amx), which is how it is tested on CPUs without AMX.
#include "moxi/kernels/x86/mxfp4-matmul.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "moxi/base/error.h"
#include "moxi/base/mx.h"
#include "moxi/base/thread-pool.h"
#include "moxi/kernels/scratch.h"
#include "moxi/kernels/x86/backend.h"
#include "moxi/kernels/x86/cpu.h"
#include "moxi/kernels/x86/mxfp4-x86.h"

namespace moxi::kernels::x86 {

struct mxfp4_access {
  static x86::mxfp4_panels panels(const packed_mxfp4& w) { return {w.qs_.data(), w.sc_.data(), w.n_, w.k_}; }
  static const uint8_t* qs(const packed_mxfp4& w) { return w.qs_.data(); }
  static const uint8_t* sc(const packed_mxfp4& w) { return w.sc_.data(); }

  // The panel-16 layout of every x86 variant (mxfp4-x86.h), without the CPU check.
  static packed_mxfp4 pack_panels(const uint8_t* blocks, const uint8_t* scales, int64_t N, int64_t K,
                                  mxfp4_variant variant) {
    packed_mxfp4 p;
    p.n_ = N;
    p.k_ = K;
    p.variant_ = variant;
    const int64_t half = K / 2, nb = K / mx::kBlock;
    const int64_t panels = (N + x86::kPanel - 1) / x86::kPanel;
    p.qs_.assign(size_t(panels * half * 16), 0);  // padded rows are zero codes with scale 2^-127: they add 0
    p.sc_.assign(size_t(panels * nb * 16), 0);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t P = n / 16, r = n % 16;
      const uint8_t* src = blocks + n * half;  // byte j: element 2j in the low nibble, 2j + 1 in the high
      for (int64_t g = 0; g < K / 8; ++g) {
        uint32_t word = 0;
        for (int j = 0; j < 4; ++j) {
          const uint32_t byte = src[4 * g + j];
          word |= (byte & 0xF) << (4 * j) | (byte >> 4) << (16 + 4 * j);
        }
        uint8_t* dst = p.qs_.data() + ((P * (K / 8) + g) * 16 + r) * 4;
        for (int i = 0; i < 4; ++i)
          dst[i] = uint8_t(word >> (8 * i));  // little-endian, as the kernels load it
      }
      const uint8_t* ss = scales + n * nb;
      uint8_t* sd = p.sc_.data() + P * nb * 16 + r;
      for (int64_t b = 0; b < nb; ++b) sd[b * 16] = ss[b];
    }
    return p;
  }
};

namespace {

// Work per thread below which a pool hand-off costs more than the split saves (docs/kernels-mxfp4.md
// "Thread-pool thresholds"): weights x tokens for the GEMV (~2 us of a thread's share of DRAM bandwidth,
// less when cached), elements for the activation conversion, multiply-adds for the GEMM.
constexpr int64_t kMinGemvMacsPerThread = int64_t(1) << 16;
constexpr int64_t kMinConvertPerThread = int64_t(1) << 15;
constexpr int64_t kMinGemmMacsPerThread = int64_t(1) << 18;

mx::elem_format act_format(act_quant act) {
  return act == act_quant::MXFP8_E4M3 ? mx::elem_format::FP8_E4M3 : mx::elem_format::FP8_E5M2;
}

enum class bf16_gemm : uint8_t { AVX512_BF16, AMX, AMX_EMULATED, AMX_EMULATED_SCALAR };

// Zeroes the padding rows [T, Tp) of an x in tile order (x86::amx_tile_offset): they all lie in the last
// token tile, whose K / 32 blocks are contiguous, so that whole tile is cleared before the rows are written.
void clear_tile_padding(uint16_t* xt, int64_t T, int64_t Tp, int64_t K) {
  if (T < Tp) std::memset(xt + x86::amx_tile_offset(Tp - 16, 0, K), 0, size_t(16 * K) * sizeof(uint16_t));
}

// Calls f(flat offset, destination offset) for each 32-element block of elements [begin, end) of x [T, K]
// (begin and end multiples of 32): the destination is the same offset row-major, or the block's place in
// the AMX tile order.
template <class F>
void for_blocks(int64_t begin, int64_t end, int64_t K, bool tiled, F f) {
  if (!tiled) return f(begin, begin, end - begin);
  for (int64_t i = begin; i < end; i += mx::kBlock) f(i, x86::amx_tile_offset(i / K, i % K, K), mx::kBlock);
}

// The GEMM (prefill) of the bf16 variants: activation quantization (the same mx::fake_quantize as the
// reference) and the bf16 conversion split over threads by 32-blocks, then weight panel pairs split over
// threads. The AMX kernels read x in whole 16-token tiles in tile order (x86::amx_tile_offset), so their xb
// has T rounded up to 16 rows, the padding zero.
void run_bf16_gemm(const float* x, const x86::mxfp4_panels& pw, float* y, int64_t T, act_quant act,
                   bf16_gemm kind) {
  thread_pool& pool = thread_pool::global();
  const int64_t K = pw.K, N = pw.N;
  const bool amx = kind != bf16_gemm::AVX512_BF16;
  const int64_t Tp = amx ? (T + x86::kAmxTokenPad - 1) / x86::kAmxTokenPad * x86::kAmxTokenPad : T;
  thread_local std::vector<float> xq_buf;
  thread_local std::vector<uint16_t> xb_buf;
  float* xq = act != act_quant::NONE ? scratch(xq_buf, size_t(T * K)) : nullptr;
  uint16_t* xb = scratch(xb_buf, size_t(Tp * K));
  clear_tile_padding(xb, T, Tp, K);
  pool.run_if(T * K, kMinConvertPerThread, [&](int tid, int nt) {
    const range r = split_range(T * K, tid, nt, mx::kBlock);
    if (r.begin == r.end) return;
    const float* src = x;
    if (xq) {
      x86::fake_quantize(act_format(act), x + r.begin, size_t(r.end - r.begin), xq + r.begin);
      src = xq;
    }
    for_blocks(r.begin, r.end, K, amx, [&](int64_t i, int64_t d, int64_t n) {
      if (kind == bf16_gemm::AMX_EMULATED_SCALAR)
        x86::f32_to_bf16_scalar(src + i, xb + d, n);
      else
        x86::f32_to_bf16_avx512bf16(src + i, xb + d, n);
    });
  });
  const int64_t pairs = (pw.panels() + 1) / 2;
  pool.run_if(T * N * K, kMinGemmMacsPerThread, [&](int tid, int nt) {
    const range r = split_range(pairs, tid, nt);
    if (r.begin == r.end) return;
    thread_local std::vector<uint32_t> wbuf;
    switch (kind) {
      case bf16_gemm::AVX512_BF16:
        x86::mxfp4_gemm_avx512bf16(xb, T, pw, r.begin, r.end, y,
                                   scratch(wbuf, size_t(x86::mxfp4_gemm_scratch_u32())));
        break;
      case bf16_gemm::AMX:
        x86::mxfp4_gemm_amx(xb, T, pw, r.begin, r.end, y,
                            scratch(wbuf, size_t(x86::mxfp4_gemm_amx_scratch_u32())));
        break;
      case bf16_gemm::AMX_EMULATED:
        x86::mxfp4_gemm_amx_emulated(xb, T, pw, r.begin, r.end, y,
                                     scratch(wbuf, size_t(x86::mxfp4_gemm_amx_scratch_u32())));
        break;
      case bf16_gemm::AMX_EMULATED_SCALAR:
        x86::mxfp4_gemm_amx_emulated_scalar(xb, T, pw, r.begin, r.end, y,
                                            scratch(wbuf, size_t(x86::mxfp4_gemm_amx_scratch_u32())));
        break;
    }
  });
}

}  // namespace

const char* to_string(mxfp4_variant v) {
  switch (v) {
    case mxfp4_variant::REF:
      return "ref";
    case mxfp4_variant::AVX512:
      return "avx512";
    case mxfp4_variant::AVX512_BF16:
      return "avx512_bf16";
    case mxfp4_variant::AMX_BF16:
      return "amx_bf16";
  }
  return "?";
}

bool mxfp4_supported(mxfp4_variant v) {
  switch (v) {
    case mxfp4_variant::REF:
      return true;
    case mxfp4_variant::AVX512:
      return x86::cpu().avx512;
    case mxfp4_variant::AVX512_BF16:
      return x86::cpu().avx512 && x86::cpu().avx512_bf16;
    case mxfp4_variant::AMX_BF16:  // its GEMV, bf16 conversion and weight decode are AVX512-BF16 code
      return x86::cpu().avx512 && x86::cpu().avx512_bf16 && x86::cpu().amx_bf16;
  }
  return false;
}

packed_mxfp4 pack_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t N, int64_t K,
                        mxfp4_variant variant) {
  MOXI_ASSERT(K % mx::kBlock == 0 && N >= 0 && K >= 0);
  if (!mxfp4_supported(variant))
    throw error(std::string("MXFP4 kernel variant ") + to_string(variant) +
                " is not supported on this CPU (" + x86::cpu_features_string() + ")");
  if (variant != mxfp4_variant::REF) return mxfp4_access::pack_panels(blocks, scales, N, K, variant);
  packed_mxfp4 p;
  p.n_ = N;
  p.k_ = K;
  p.variant_ = variant;
  p.qs_.assign(blocks, blocks + N * (K / 2));
  p.sc_.assign(scales, scales + N * (K / mx::kBlock));
  return p;
}

void matmul_mxfp4(const float* x, const packed_mxfp4& w, float* y, int64_t T, act_quant act,
                  const mxfp4_options& opt) {
  const int64_t N = w.rows(), K = w.cols();
  MOXI_ASSERT(T >= 0);
  if (T == 0 || N == 0) return;
  if (w.variant() == mxfp4_variant::REF) {
    ref::matmul_mxfp4(x, mxfp4_access::qs(w), mxfp4_access::sc(w), y, T, N, K, act);
    return;
  }
  thread_pool& pool = thread_pool::global();
  const x86::mxfp4_panels pw = mxfp4_access::panels(w);
  const bool bf16 = w.variant() == mxfp4_variant::AVX512_BF16 || w.variant() == mxfp4_variant::AMX_BF16;
  if (!bf16 || (T <= opt.gemv_max_tokens && T <= x86::kGemvMaxTokens)) {
    // GEMV (decode): one pool job. Each thread quantizes and converts the few rows of x itself (T * K
    // elements against its share of N * K weights) instead of a job per step, then runs its panels.
    pool.run_if(T * N * K, kMinGemvMacsPerThread, [&](int tid, int nt) {
      const range r = split_range(pw.panels(), tid, nt);
      if (r.begin == r.end) return;
      thread_local std::vector<float> xq_buf;
      const float* xx = x;
      if (act != act_quant::NONE) {
        float* xq = scratch(xq_buf, size_t(T * K));
        x86::fake_quantize(act_format(act), x, size_t(T * K), xq);
        xx = xq;
      }
      if (!bf16) {
        for (int64_t t0 = 0; t0 < T; t0 += x86::kGemvMaxTokens) {
          const int64_t tn = T - t0 < x86::kGemvMaxTokens ? T - t0 : x86::kGemvMaxTokens;
          x86::mxfp4_gemv_avx512(xx + t0 * K, tn, pw, r.begin, r.end, y + t0 * N);
        }
        return;
      }
      thread_local std::vector<uint16_t> xb_buf;
      uint16_t* xb = scratch(xb_buf, size_t(T * K));
      x86::f32_to_bf16_avx512bf16(xx, xb, T * K);
      x86::mxfp4_gemv_avx512bf16(xb, T, pw, r.begin, r.end, y);
    });
    return;
  }
  run_bf16_gemm(x, pw, y, T, act,
                w.variant() == mxfp4_variant::AMX_BF16 ? bf16_gemm::AMX : bf16_gemm::AVX512_BF16);
}

namespace detail {

void matmul_mxfp4_amx(const float* x, const uint8_t* blocks, const uint8_t* scales, float* y, int64_t T,
                      int64_t N, int64_t K, act_quant act, amx_tiles tiles) {
  MOXI_ASSERT(K % mx::kBlock == 0 && N >= 0 && K >= 0 && T >= 0);
  const mxfp4_variant needs = tiles == amx_tiles::HARDWARE   ? mxfp4_variant::AMX_BF16
                              : tiles == amx_tiles::EMULATED ? mxfp4_variant::AVX512_BF16
                                                             : mxfp4_variant::REF;
  if (!mxfp4_supported(needs))
    throw error(std::string("AMX GEMM on these tiles needs the ") + to_string(needs) +
                " variant, not supported on this CPU (" + x86::cpu_features_string() + ")");
  if (T == 0 || N == 0) return;
  const packed_mxfp4 w = mxfp4_access::pack_panels(blocks, scales, N, K, mxfp4_variant::AMX_BF16);
  run_bf16_gemm(x, mxfp4_access::panels(w), y, T, act,
                tiles == amx_tiles::HARDWARE   ? bf16_gemm::AMX
                : tiles == amx_tiles::EMULATED ? bf16_gemm::AMX_EMULATED
                                               : bf16_gemm::AMX_EMULATED_SCALAR);
}

void matmul_bf16_panels_amx(const float* x, const uint16_t* w, const float* bias, float* y, int64_t T,
                            int64_t N, int64_t K, amx_tiles tiles) {
  MOXI_ASSERT(K % mx::kBlock == 0 && N >= 0 && T >= 0, "the AMX dense GEMM needs K % 32 == 0");
  const bool hardware = tiles == amx_tiles::HARDWARE;
  if (hardware && !mxfp4_supported(mxfp4_variant::AMX_BF16))
    throw error(std::string("the AMX dense GEMM on hardware tiles needs AMX-BF16, not on this CPU (") +
                x86::cpu_features_string() + ")");
  if (T == 0 || N == 0) return;
  thread_pool& pool = thread_pool::global();
  const x86::bf16_panels pw{w, N, K};
  const int64_t pairs = (pw.panels() + 1) / 2;
  // Token blocks of kDenseAmxBlockTokens: the split of one block is the scratch (a fixed size, whatever T).
  const int64_t Tb = std::min(T, kDenseAmxBlockTokens);
  const int64_t Tbp = (Tb + x86::kAmxTokenPad - 1) / x86::kAmxTokenPad * x86::kAmxTokenPad;
  thread_local std::vector<uint16_t> xs_buf;
  uint16_t* xs = scratch(xs_buf, size_t(x86::kDenseSplits * Tbp * K));
  for (int64_t t0 = 0; t0 < T; t0 += Tb) {
    const int64_t tn = std::min(Tb, T - t0), tp = (tn + x86::kAmxTokenPad - 1) / x86::kAmxTokenPad * 16;
    const float* xb = x + t0 * K;
    float* yb = y + t0 * N;
    for (int s = 0; s < x86::kDenseSplits; ++s) clear_tile_padding(xs + s * tp * K, tn, tp, K);
    pool.run_if(tn * K, kMinConvertPerThread, [&](int tid, int nt) {
      const range r = split_range(tn * K, tid, nt, mx::kBlock);
      if (r.begin == r.end) return;
      for_blocks(r.begin, r.end, K, true, [&](int64_t i, int64_t d, int64_t n) {
        uint16_t* hi = xs + d;
        if (hardware)
          x86::split_bf16x3_avx512bf16(xb + i, n, hi, hi + tp * K, hi + 2 * tp * K);
        else
          x86::split_bf16x3_scalar(xb + i, n, hi, hi + tp * K, hi + 2 * tp * K);
      });
    });
    pool.run_if(tn * N * K, kMinGemmMacsPerThread, [&](int tid, int nt) {
      const range r = split_range(pairs, tid, nt);
      if (r.begin == r.end) return;
      if (hardware)
        x86::matmul_bf16p_amx(xs, tn, pw, r.begin, r.end, yb);
      else
        x86::matmul_bf16p_amx_emulated_scalar(xs, tn, pw, r.begin, r.end, yb);
      if (!bias) return;
      const int64_t n0 = r.begin * 2 * x86::kPanel, n1 = std::min(N, r.end * 2 * x86::kPanel);
      for (int64_t t = 0; t < tn; ++t)
        for (int64_t n = n0; n < n1; ++n) yb[t * N + n] += bias[n];
    });
  }
}

}  // namespace detail

}  // namespace moxi::kernels::x86
