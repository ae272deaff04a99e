// The AMX-BF16 MXFP4 GEMM body, written once against a small tile interface and compiled twice: with the
// hardware tile instructions (mxfp4-gemm-amx.cpp) and with the scalar tile emulator (amx-emu.h; in
// mxfp4-gemm-amx.cpp with the AVX-512 weight decode, in mxfp4-gemm-amx-emu.cpp with a scalar one), so
// the tests exercise on any CPU the same blocking, tile shapes, strides and remainder handling that run
// on AMX hardware. Internal to those translation units; callers use the entry points in mxfp4-x86.h.
//
// Tile interface (a class Tiles with): config(const amx_tile_config&) = LDTILECFG, release() =
// TILERELEASE, and templates on compile-time tile numbers (the hardware intrinsics take the tile number
// as a literal): zero<T>(), load<T>(ptr, stride_bytes), store<T>(ptr, stride_bytes), dp<C, A, B>() =
// TDPBF16PS. Weight policy (a class with): b_rows tiles(w, P, two, kc, kn, buf): where the B-tile rows of
// panel P (and P + 1 when two) for K range [kc, kc + kn) are, decoded into buf (kAmxDecodeU32 uint32) when
// the weights are not bf16 pairs already, as in the layout below.
//
// Layout. The packed "panel-16" weights (mxfp4-x86.h) hold, per panel, each K-pair p of 16 rows. Decoded
// (scale folded in, exact) to a dword per row = (bf16 of element 2p) | (bf16 of
// element 2p+1) << 16, those 16 dwords are one 64-byte row of a TDPBF16PS B tile in its "VNNI" layout: B
// row k holds K-pair k for 16 output rows (the tile's columns), low half paired with A's even element
// (SDM: temp[2n+0] += A[m].bf16[2k+0] * B[k].bf16[2n+0]). So a B tile is 16 consecutive K-pairs of one
// panel; the decode buffer interleaves the two panels of a pair, 128 bytes per K-pair (stride 128). Dense
// BF16 panels (ref::bf16_panel_index) hold exactly those rows, so their B tiles load from the weights
// themselves, 64 bytes per K-pair of one panel. The
// A tile is 16 tokens x 32 bf16 of x (1 KiB contiguous: x is kept in tile order, amx_tile_offset), and C = 16
// tokens x 16 rows of y in fp32, which is y's own layout (row stride 4N bytes).
//
// Tiling, per thread (it owns a range of panel pairs): token blocks of kAmxTb, K-chunks of kAmxKc; per
// panel pair and chunk the weights are decoded once into a 32 KiB buffer, then each 32-token step runs a
// 2 x 2 block of C tiles (tmm0..3 = C(token tile i, panel j) at 2i + j), 2 A tiles (tmm4, 5) and 2 B
// tiles (tmm6, 7): 4 TDPBF16PS per 2 + 2 tile loads. C accumulates in y across K-chunks (loaded back at
// kc > 0). Remainders: x rows are zero-padded by the caller to a multiple of 16 tokens (kAmxTokenPad), a
// step with <= 16 tokens left uses one A tile, a last odd panel one B tile, and C tiles that reach past T
// or N go through a 16 x 16 bounce buffer so only valid outputs are read or written.
#pragma once

#include <cstdint>

#include "moxi/kernels/x86/amx-emu.h"
#include "moxi/kernels/x86/mxfp4-x86.h"

namespace moxi::kernels::x86 {
// Internal linkage on purpose: each translation unit (each with its own -m flags) gets its own copy, so
// the linker can never substitute a copy compiled for a richer ISA.
namespace {

constexpr int64_t kAmxKc = 512;  // K-chunk (multiple of 32): decoded panel pair 32 x 512 bf16 = 32 KiB
constexpr int64_t kAmxTb = 256;  // token block (multiple of 32): x block 256 x 512 bf16 = 256 KiB
constexpr int64_t kAmxDecodeU32 = (kAmxKc / 2) * 32;
static_assert(kAmxKc % 32 == 0 && kAmxTb % 32 == 0);

// Where the B-tile rows of a panel pair's K-chunk are: K-pair p of panel P at b0 + p * stride bytes, of
// panel P + 1 at b1 + p * stride.
struct b_rows {
  const char* b0;
  const char* b1;
  int64_t stride;
};

// MXFP4 weights: a Decode (panel(w, P, kc, kn, out, stride) writes panel P's bf16 pairs for the K range,
// K-pair p at out + p * stride uint32) decodes the pair into buf, the two panels interleaved.
template <class Decode>
struct decoded {
  template <class W>
  static b_rows tiles(const W& w, int64_t P, bool two, int64_t kc, int64_t kn, uint32_t* buf) {
    Decode::panel(w, P, kc, kn, buf, 32);
    if (two) Decode::panel(w, P + 1, kc, kn, buf + 16, 32);
    return {reinterpret_cast<const char*>(buf), reinterpret_cast<const char*>(buf + 16), 128};
  }
};

// Dense BF16 panels: the B-tile rows are the weights as stored (K % 32 == 0, so a panel is K / 2 pairs).
struct dense_weights {
  static b_rows tiles(const bf16_panels& w, int64_t P, bool two, int64_t kc, int64_t, uint32_t*) {
    const char* p0 = reinterpret_cast<const char*>(w.w + (P * w.K + kc) * kPanel);
    return {p0, two ? p0 + w.K * kPanel * 2 : p0, 64};
  }
};

// Palette 1, all 8 tiles 16 rows x 64 bytes (C: 16 x 16 fp32; A: 16 x 32 bf16; B: 16 K-pairs x 16 rows).
inline amx_tile_config gemm_tile_config() {
  amx_tile_config c{};
  c.palette_id = 1;
  for (int t = 0; t < kAmxTiles; ++t) {
    c.rows[t] = kAmxMaxRows;
    c.colsb[t] = kAmxBytesPerRow;
  }
  return c;
}

// The emulator behind the tile interface.
struct emu_tiles {
  amx_emu& e;
  void config(const amx_tile_config& c) { e.ldtilecfg(c); }
  void release() { e.tilerelease(); }
  template <int T>
  void zero() {
    e.tilezero(T);
  }
  template <int T>
  void load(const void* p, int64_t stride) {
    e.tileloadd(T, p, stride);
  }
  template <int T>
  void store(void* p, int64_t stride) {
    e.tilestored(T, p, stride);
  }
  template <int C, int A, int B>
  void dp() {
    e.tdpbf16ps(C, A, B);
  }
};

// C tile from y (tv valid tokens x nv valid rows at yt, row stride N), directly when the tile is whole.
template <int C, class Tiles>
void load_c(Tiles& tl, const float* yt, int64_t N, int64_t tv, int64_t nv, float* bounce) {
  if (tv == 16 && nv == 16) {
    tl.template load<C>(yt, N * 4);
    return;
  }
  for (int64_t r = 0; r < 16; ++r)
    for (int64_t c = 0; c < 16; ++c) bounce[r * 16 + c] = r < tv && c < nv ? yt[r * N + c] : 0.0f;
  tl.template load<C>(bounce, 64);
}

template <int C, class Tiles>
void store_c(Tiles& tl, float* yt, int64_t N, int64_t tv, int64_t nv, float* bounce) {
  if (tv == 16 && nv == 16) {
    tl.template store<C>(yt, N * 4);
    return;
  }
  tl.template store<C>(bounce, 64);
  for (int64_t r = 0; r < tv; ++r)
    for (int64_t c = 0; c < nv; ++c) yt[r * N + c] = bounce[r * 16 + c];
}

inline int64_t clamp16(int64_t n) {
  return n <= 0 ? 0 : n >= 16 ? 16 : n;
}

// One 32-token (NA = 2) or 16-token (NA = 1) step over one panel pair (NB = 2) or a last single panel
// (NB = 1), all npairs K-pairs of the chunk. xt: x in tile order (mxfp4-x86.h amx_tile_offset) at the
// step's first token and the chunk's first element, and S copies of it (the bf16 terms of a split
// activation, S = 3 for the dense GEMM) split_stride elements apart, all multiplied by the same weights
// into the same C tiles; the next token tile's A tiles are KP = K / 32 tiles further. wb: the B-tile rows;
// yt: y at (t0, row0). tv/nv: valid tokens/rows of the step.
template <int NA, int NB, int S, class Tiles>
void tile_step(Tiles& tl, const uint16_t* xt, int64_t KP, int64_t split_stride, const b_rows& wb,
               int64_t npairs, float* yt, int64_t N, int64_t tv, int64_t nv, bool accumulate, float* bounce) {
  const int64_t tv0 = clamp16(tv), tv1 = clamp16(tv - 16), nv0 = clamp16(nv), nv1 = clamp16(nv - 16);
  if (accumulate) {
    load_c<0>(tl, yt, N, tv0, nv0, bounce);
    if constexpr (NB == 2) load_c<1>(tl, yt + 16, N, tv0, nv1, bounce);
    if constexpr (NA == 2) load_c<2>(tl, yt + 16 * N, N, tv1, nv0, bounce);
    if constexpr (NA == 2 && NB == 2) load_c<3>(tl, yt + 16 * N + 16, N, tv1, nv1, bounce);
  } else {
    tl.template zero<0>();
    if constexpr (NB == 2) tl.template zero<1>();
    if constexpr (NA == 2) tl.template zero<2>();
    if constexpr (NA == 2 && NB == 2) tl.template zero<3>();
  }
  for (int64_t p = 0; p < npairs; p += 16) {
    tl.template load<6>(wb.b0 + p * wb.stride, wb.stride);
    if constexpr (NB == 2) tl.template load<7>(wb.b1 + p * wb.stride, wb.stride);
    for (int s = 0; s < S; ++s) {
      const uint16_t* xs = xt + s * split_stride + (p / 16) * 512;
      tl.template load<4>(xs, 64);
      if constexpr (NA == 2) tl.template load<5>(xs + KP * 512, 64);
      tl.template dp<0, 4, 6>();
      if constexpr (NB == 2) tl.template dp<1, 4, 7>();
      if constexpr (NA == 2) tl.template dp<2, 5, 6>();
      if constexpr (NA == 2 && NB == 2) tl.template dp<3, 5, 7>();
    }
  }
  store_c<0>(tl, yt, N, tv0, nv0, bounce);
  if constexpr (NB == 2) store_c<1>(tl, yt + 16, N, tv0, nv1, bounce);
  if constexpr (NA == 2) store_c<2>(tl, yt + 16 * N, N, tv1, nv0, bounce);
  if constexpr (NA == 2 && NB == 2) store_c<3>(tl, yt + 16 * N + 16, N, tv1, nv1, bounce);
}

// y[T, rows of panel pairs [pp0, pp1)] = xb . W^T; xb bf16 [Tpad, K] in tile order (amx_tile_offset) with
// Tpad = T rounded up to 16 and the padding rows zero (S such arrays split_stride elements apart, summed:
// see tile_step); scratch:
// kAmxDecodeU32 uint32 for a Weights policy that decodes (null for dense_weights). W: the weights the
// Weights policy reads (K, N, panels()).
// Configures the tiles on entry and releases them on return (tile state is per thread).
template <class Weights, int S = 1, class Tiles, class W>
void amx_gemm(Tiles& tl, const uint16_t* xb, int64_t T, const W& w, int64_t pp0, int64_t pp1, float* y,
              uint32_t* scratch, int64_t split_stride = 0) {
  const int64_t K = w.K, N = w.N, panels = w.panels();
  alignas(64) float bounce[16 * 16];
  tl.config(gemm_tile_config());
  for (int64_t tb = 0; tb < T; tb += kAmxTb) {
    const int64_t te = T - tb < kAmxTb ? T : tb + kAmxTb;
    for (int64_t kc = 0; kc < K; kc += kAmxKc) {
      const int64_t kn = K - kc < kAmxKc ? K - kc : kAmxKc;
      for (int64_t pp = pp0; pp < pp1; ++pp) {
        const int64_t P = 2 * pp, row0 = P * kPanel;
        const bool two = P + 1 < panels;
        const b_rows wb = Weights::tiles(w, P, two, kc, kn, scratch);
        for (int64_t t0 = tb; t0 < te; t0 += 32) {
          const uint16_t* xa = xb + amx_tile_offset(t0, kc, K);
          float* yt = y + t0 * N + row0;
          const int64_t tv = te - t0, nv = N - row0;
          const bool acc = kc > 0;
          if (tv > 16) {
            if (two)
              tile_step<2, 2, S>(tl, xa, K / 32, split_stride, wb, kn / 2, yt, N, tv, nv, acc, bounce);
            else
              tile_step<2, 1, S>(tl, xa, K / 32, split_stride, wb, kn / 2, yt, N, tv, nv, acc, bounce);
          } else {
            if (two)
              tile_step<1, 2, S>(tl, xa, K / 32, split_stride, wb, kn / 2, yt, N, tv, nv, acc, bounce);
            else
              tile_step<1, 1, S>(tl, xa, K / 32, split_stride, wb, kn / 2, yt, N, tv, nv, acc, bounce);
          }
        }
      }
    }
  }
  tl.release();
}

}  // namespace
}  // namespace moxi::kernels::x86
