// MXFP4 prefill GEMM on AMX-BF16 tiles (TDPBF16PS), the body in mxfp4-gemm-amx.h run on the hardware
// tiles; also that body on the tile emulator with this file's AVX-512 weight decode (the test hook that
// covers everything here but the tile instructions on CPUs without AMX), and the register-resident
// TDPBF16PS loop the benchmark takes as the AMX peak.
//
// Weights stay 4.25 bits in memory; per panel pair and K-chunk they are decoded (scale folded in, exact:
// an E2M1 value times a power of two has <= 2 significant bits) into bf16 pairs, which are B-tile rows as
// they are (mxfp4-gemm-amx.h "Layout"). Only called after kernels::x86::cpu() reports amx_bf16, which
// includes the Linux arch_prctl(ARCH_REQ_XCOMP_PERM) grant for tile data; tiles are configured per call
// on the calling thread and released before returning.
//
// Built with the AVX-512 flags, -mavx512bf16, -mamx-tile and -mamx-bf16; same single-header rule as the
// other x86 kernels (only immintrin.h and the kernel headers, which hold no standard-library code).
#if defined(__x86_64__)
#include "moxi/kernels/x86/mxfp4-gemm-amx.h"

#include <immintrin.h>

#include "moxi/kernels/x86/mxfp4-avx512-inl.h"
#include "moxi/kernels/x86/mxfp4-x86.h"

namespace moxi::kernels::x86 {
namespace {

// GCC 12's tile intrinsics are macros that paste the tile number into the instruction text, so it must be
// a literal: each template below maps its compile-time tile numbers to literal ones. _tile_loadd and
// _tile_loadconfig declare no memory input beyond their pointer (GCC's asm reads "r"(base) or 8 bytes
// of the config), so a compiler barrier before each keeps the stores that fill the bytes they read
// (decode buffer, bounce tile, config) from being moved past or dropped.
inline void compiler_barrier() {
  __asm__ volatile("" ::: "memory");
}

struct hw_tiles {
  void config(const amx_tile_config& c) {
    compiler_barrier();
    _tile_loadconfig(&c);
  }
  void release() { _tile_release(); }
  template <int T>
  void zero() {
    static_assert(T >= 0 && T < 8);
    if constexpr (T == 0) _tile_zero(0);
    if constexpr (T == 1) _tile_zero(1);
    if constexpr (T == 2) _tile_zero(2);
    if constexpr (T == 3) _tile_zero(3);
    if constexpr (T == 4) _tile_zero(4);
    if constexpr (T == 5) _tile_zero(5);
    if constexpr (T == 6) _tile_zero(6);
    if constexpr (T == 7) _tile_zero(7);
  }
  template <int T>
  void load(const void* p, int64_t s) {
    static_assert(T >= 0 && T < 8);
    compiler_barrier();
    if constexpr (T == 0) _tile_loadd(0, p, s);
    if constexpr (T == 1) _tile_loadd(1, p, s);
    if constexpr (T == 2) _tile_loadd(2, p, s);
    if constexpr (T == 3) _tile_loadd(3, p, s);
    if constexpr (T == 4) _tile_loadd(4, p, s);
    if constexpr (T == 5) _tile_loadd(5, p, s);
    if constexpr (T == 6) _tile_loadd(6, p, s);
    if constexpr (T == 7) _tile_loadd(7, p, s);
  }
  template <int T>
  void store(void* p, int64_t s) {
    static_assert(T >= 0 && T < 8);
    if constexpr (T == 0) _tile_stored(0, p, s);
    if constexpr (T == 1) _tile_stored(1, p, s);
    if constexpr (T == 2) _tile_stored(2, p, s);
    if constexpr (T == 3) _tile_stored(3, p, s);
    if constexpr (T == 4) _tile_stored(4, p, s);
    if constexpr (T == 5) _tile_stored(5, p, s);
    if constexpr (T == 6) _tile_stored(6, p, s);
    if constexpr (T == 7) _tile_stored(7, p, s);
  }
  // Only the four products of the 2 x 2 block are wired (C(i, j) = 2i + j, A(i) = 4 + i, B(j) = 6 + j).
  template <int C, int A, int B>
  void dp() {
    static_assert(C == 2 * (A - 4) + (B - 6) && A >= 4 && A < 6 && B >= 6 && B < 8);
    if constexpr (C == 0) _tile_dpbf16ps(0, 4, 6);
    if constexpr (C == 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (C == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (C == 3) _tile_dpbf16ps(3, 5, 7);
  }
};

// Panel P, pairs [kc/2, (kc+kn)/2): out[pair * stride + r] = bf16(w[2p]) | bf16(w[2p+1]) << 16 for the
// 16 rows r, w = E2M1 value x E8M0 scale in fp32 (exact; 0 x NaN-scale stays NaN), bf16 = its upper half
// (exact, the low half is zero). Bit-identical to the scalar decode of mxfp4-gemm-amx-emu.cpp (tested).
struct avx512_decode {
  static void panel(const mxfp4_panels& w, int64_t P, int64_t kc, int64_t kn, uint32_t* out, int64_t stride) {
    decode_panel_bf16(w, P, kc, kn, out, stride);
  }
};

}  // namespace

void split_bf16x3_avx512bf16(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, uint16_t* lo2) {
  const auto widen = [](__m256bh b) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(reinterpret_cast<const __m256i&>(b)), 16));
  };
  const auto store = [](uint16_t* p, __m256bh b) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), reinterpret_cast<const __m256i&>(b));
  };
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m256bh h = _mm512_cvtneps_pbh(v);
    const __m512 r1 = _mm512_sub_ps(v, widen(h));
    const __m256bh l = _mm512_cvtneps_pbh(r1);
    const __m256bh l2 = _mm512_cvtneps_pbh(_mm512_sub_ps(r1, widen(l)));
    store(hi + i, h);
    store(lo + i, l);
    store(lo2 + i, l2);
  }
}

void matmul_bf16p_amx(const uint16_t* xs, int64_t T, const bf16_panels& w, int64_t pp0, int64_t pp1, float* y) {
  const int64_t Tp = (T + kAmxTokenPad - 1) / kAmxTokenPad * kAmxTokenPad;
  hw_tiles tl;
  amx_gemm<dense_weights, kDenseSplits>(tl, xs, T, w, pp0, pp1, y, nullptr, Tp * w.K);
}

void mxfp4_gemm_amx(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t pp0, int64_t pp1, float* y,
                    uint32_t* scratch) {
  hw_tiles tl;
  amx_gemm<decoded<avx512_decode>>(tl, xb, T, w, pp0, pp1, y, scratch);
}

void mxfp4_gemm_amx_emulated(const uint16_t* xb, int64_t T, const mxfp4_panels& w, int64_t pp0, int64_t pp1,
                             float* y, uint32_t* scratch) {
  amx_emu emu;
  emu_tiles tl{emu};
  amx_gemm<decoded<avx512_decode>>(tl, xb, T, w, pp0, pp1, y, scratch);
}

double amx_bf16_peak_loop(int64_t iters) {
  // Six independent accumulators (tmm0..5; TDPBF16PS latency is several times its issue interval) and the
  // operands (tmm6, 7) loaded once: each iteration is 6 x 16 x 16 x 32 multiply-adds (98,304 flop), no
  // memory traffic, the tile unit's issue rate.
  amx_tile_config c{};
  c.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  alignas(64) uint16_t ab[16 * 32];
  for (int i = 0; i < 16 * 32; ++i) ab[i] = uint16_t(0x3F80 + (i & 7));  // ~1.0 in bf16
  alignas(64) float cs[16 * 16];
  hw_tiles tl;
  tl.config(c);
  tl.zero<0>();
  tl.zero<1>();
  tl.zero<2>();
  tl.zero<3>();
  tl.zero<4>();
  tl.zero<5>();
  tl.load<6>(ab, 64);
  tl.load<7>(ab, 64);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  double sum = 0;
  auto add = [&] {
    for (float v : cs) sum += double(v);
  };
  tl.store<0>(cs, 64);
  add();
  tl.store<1>(cs, 64);
  add();
  tl.store<2>(cs, 64);
  add();
  tl.store<3>(cs, 64);
  add();
  tl.store<4>(cs, 64);
  add();
  tl.store<5>(cs, 64);
  add();
  tl.release();
  return sum;
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
