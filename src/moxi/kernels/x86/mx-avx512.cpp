// MXFP8 fake quantization (mx::fake_quantize for FP8 E4M3 / E5M2) on AVX-512 F, 16 elements at a time,
// given each 32-block's E8M0 scale byte (mx::block_scale, computed by the caller). Every step is the
// reference's exact arithmetic in another form: y = x * 2^-k (one fp32 product, as encode_block), the
// element exponent e = max(floor(log2 |y|), emin) from the bits, n = |y| * 2^(mbits - e) (exact), RNE to an
// integer q (VRNDSCALEPS; the reference's truncate-and-compare rule on the same exact n), the grid value
// q * 2^(e - mbits) (exact: the value the reference's decode table holds for that code), saturation to the
// largest finite value, the sign of y, and one fp32 product with the block scale. So the output is
// bit-identical to mx::fake_quantize (tests/kernels/backend-ops-test.cpp).
//
// Built with -mavx512f -mavx512bw -mavx512vl -mavx512dq (kernels/CMakeLists.txt); called only after
// kernels::x86::cpu() confirmed them. Only intrinsics and the C integer header are included.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstdint>

// GCC 12's AVX-512 intrinsics pass _mm*_undefined_*() as the masked-off source, which -Wuninitialized flags
// once inlined (a false positive, as in matmul-f32-avx512.cpp); silenced for this file's intrinsics only.
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace moxi::kernels::x86 {
namespace {

// 2^e as an fp32 bit pattern for e in [-149, 127] (subnormal below -126), as mx::detail::pow2.
inline uint32_t pow2_bits(int e) {
  return e >= -126 ? uint32_t(e + 127) << 23 : uint32_t(1) << (e + 149);
}

struct fp8_spec {
  int mbits, emin;
  float max_value;
};

void quantize16(const float* x, float* out, __m512 inv, __m512 scale, const fp8_spec& f) {
  const __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x), inv);
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(int(0x80000000u)));
  const __m512 a = _mm512_abs_ps(y);
  // e = max(biased exponent - 127, emin): subnormals and zero land on emin, as in the reference.
  const __m512i biased = _mm512_srli_epi32(_mm512_castps_si512(a), 23);
  const __m512i e =
      _mm512_max_epi32(_mm512_sub_epi32(biased, _mm512_set1_epi32(127)), _mm512_set1_epi32(f.emin));
  // n = a * 2^(mbits - e), an exact scaling into [0, 2^(mbits+1)); q = RNE(n); v = q * 2^(e - mbits).
  const __m512 up =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(127 + f.mbits), e), 23));
  const __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(a, up), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 down =
      _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(127 - f.mbits)), 23));
  __m512 v = _mm512_mul_ps(q, down);
  // !(a < max): the largest finite value (the reference's SAT rule).
  const __mmask16 sat = _mm512_cmp_ps_mask(a, _mm512_set1_ps(f.max_value), _CMP_NLT_UQ);
  v = _mm512_mask_mov_ps(v, sat, _mm512_set1_ps(f.max_value));
  v = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
  _mm512_storeu_ps(out, _mm512_mul_ps(v, scale));
}

}  // namespace

void fake_quantize_fp8_avx512(bool e4m3, const float* x, const uint8_t* scales, int64_t n, float* out) {
  const fp8_spec f = e4m3 ? fp8_spec{3, -6, 448.0f} : fp8_spec{2, -14, 57344.0f};
  for (int64_t b = 0; b < n / 32; ++b) {
    const int s = scales[b];
    const float* xb = x + b * 32;
    float* ob = out + b * 32;
    if (s == 255) {  // NaN block: codes 0, times the NaN scale
      const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fc00000));
      const __m512 v = _mm512_mul_ps(_mm512_setzero_ps(), nan);
      _mm512_storeu_ps(ob, v);
      _mm512_storeu_ps(ob + 16, v);
      continue;
    }
    const __m512 inv = _mm512_castsi512_ps(_mm512_set1_epi32(int(pow2_bits(127 - s))));
    const __m512 scale = _mm512_castsi512_ps(_mm512_set1_epi32(int(pow2_bits(s - 127))));
    quantize16(xb, ob, inv, scale, f);
    quantize16(xb + 16, ob + 16, inv, scale, f);
  }
}

}  // namespace moxi::kernels::x86
#endif  // __x86_64__
