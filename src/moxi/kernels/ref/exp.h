// moxi's own fp32 exp, shared by the KDA kernels (ref/kda.cpp and its AVX-512 twin x86/kda-avx512.cpp) and
// the sigmoid the elementwise ops are built on (ref/basic.cpp and x86/elementwise-avx512.cpp).
// libm's expf is a scalar call the AVX-512 twin could not vectorize without giving up bit-identity with the
// reference; this exp is written as one fixed sequence of IEEE fp32 operations, here for one float and in
// kda-avx512.cpp (exp16) for 16 lanes, so both forms give the same bits by construction. Every multiply-add
// is an explicit fma (std::fma here, _mm512_fmadd_ps there), never a product and a sum a compiler could
// contract in one translation unit and not in the other.
//
// Method (the textbook Cody-Waite range reduction; W. J. Cody, W. Waite, "Software Manual for the Elementary
// Functions", 1980; J.-M. Muller, "Elementary Functions"):
//   n = round(x log2 e) by the 1.5 * 2^23 rounding trick; r = x - n ln2 with ln2 split hi + lo, so
//   |r| <= ln2 / 2; e^r = 1 + r + r^2 q(r) with q of degree 4 (a degree-6 polynomial in r), its
//   coefficients a weighted Remez fit of (e^r - 1 - r) / r^2 on [-ln2/2, ln2/2] minimizing the relative
//   error of e^r (3.1e-9, 0.05 ulp, before rounding the coefficients to fp32); the result is
//   e^r * 2^a * 2^b with a + b = n, two multiplications by exact powers of two built from exponent bits,
//   so that results in the subnormal range are rounded once, correctly, from e^r.
// Special values: inputs are clamped to [-110, 100] first (comparisons that let NaN through), so
//   x <= -103.98 gives +0 through gradual underflow (subnormals are produced, not flushed), x >= 88.73
//   gives +inf, NaN gives NaN (the input's, quieted), -0 gives 1.
// Accuracy against exp in fp64 (tests/kernels/exp-test.cpp, sweeps of [-104, 89]): measured max error
// 0.87 ulp (subnormal results in units of 2^-149).
// Cost: the AVX-512 form is about 20 vector instructions per 16 values. In the baseline-compiled reference
// each std::fma is a libm call (glibc picks the hardware FMA where there is one), slower than expf; that only
// matters where the reference is what runs (no AVX-512, or MOXI_KERNELS=ref).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace moxi::kernels::ref {

namespace exp_const {
inline constexpr float kMin = -110.0f;             // below: e^x rounds to +0 anyway (n <= -159)
inline constexpr float kMax = 100.0f;              // above: e^x is +inf anyway (n >= 145)
inline constexpr float kLog2e = 0x1.715476p+0f;    // log2(e) rounded to fp32
inline constexpr float kRound = 0x1.8p+23f;        // 1.5 * 2^23: t = x log2e + kRound holds round(.) in its
                                                   // low mantissa bits, and t - kRound is it as a float
inline constexpr float kLn2Hi = 0x1.62e430p-1f;    // ln 2 rounded to fp32
inline constexpr float kLn2Lo = -0x1.05c610p-29f;  // ln 2 - kLn2Hi rounded to fp32
inline constexpr float kC2 = 0x1.fffffcp-2f;       // q(r) = c2 + c3 r + c4 r^2 + c5 r^3 + c6 r^4
inline constexpr float kC3 = 0x1.555492p-3f;
inline constexpr float kC4 = 0x1.5558f2p-5f;
inline constexpr float kC5 = 0x1.1239e2p-7f;
inline constexpr float kC6 = 0x1.6a2434p-10f;
}  // namespace exp_const

// e^x in fp32, bit-identical lane by lane to exp16 in x86/exp16-inl.h (see above for accuracy and special
// values). Integer steps run on uint32_t so that the garbage exponent a NaN input produces wraps instead of
// overflowing; the result is NaN either way.
inline float exp_f32(float x) {
  using namespace exp_const;
  x = kMin > x ? kMin : x;  // the same comparisons as _mm512_max_ps(kMin, x) / _mm512_min_ps(kMax, x)
  x = kMax < x ? kMax : x;
  const float t = std::fma(x, kLog2e, kRound);
  const float n = t - kRound;
  float r = std::fma(n, -kLn2Hi, x);  // exact: a multiple of 2^-25 (or r = x) below 1/2 in magnitude
  r = std::fma(n, -kLn2Lo, r);
  float p = std::fma(kC6, r, kC5);
  p = std::fma(p, r, kC4);
  p = std::fma(p, r, kC3);
  p = std::fma(p, r, kC2);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);                                                          // 1 + r (1 + r q(r))
  const uint32_t ni = std::bit_cast<uint32_t>(t) - std::bit_cast<uint32_t>(kRound);  // n as an integer
  const uint32_t a = uint32_t(int32_t(ni) >> 1), b = ni - a;                         // a + b = n
  const float sa = std::bit_cast<float>((a + 127u) << 23), sb = std::bit_cast<float>((b + 127u) << 23);
  return (p * sa) * sb;
}

}  // namespace moxi::kernels::ref
