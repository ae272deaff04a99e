// exp16: ref::exp_f32 (ref/exp.h) on 16 lanes, its fp32 operations one for one and in its order, so each
// lane is bit-identical to the scalar form (tests/kernels/exp-test.cpp). Shared by the AVX-512 KDA kernels
// and the elementwise ops. Include it ONLY from translation units built with at least -mavx512f and
// -ffp-contract=off (kernels/CMakeLists.txt). Internal linkage on purpose, as mxfp4-avx512-inl.h: each
// including translation unit gets its own copy compiled with its own flags.
#pragma once

#if !defined(__AVX512F__)
#error "exp16-inl.h needs a translation unit built with -mavx512f"
#endif

#include <immintrin.h>

#include "moxi/kernels/ref/exp.h"

namespace moxi::kernels::x86 {
namespace {

// ref::exp_f32 on 16 lanes: its operations one for one, in its order (see ref/exp.h for the method).
inline __m512 exp16(__m512 x) {
  namespace c = ref::exp_const;
  x = _mm512_max_ps(_mm512_set1_ps(c::kMin), x);  // kMin > x ? kMin : x, NaN passes
  x = _mm512_min_ps(_mm512_set1_ps(c::kMax), x);  // kMax < x ? kMax : x
  const __m512 round = _mm512_set1_ps(c::kRound);
  const __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(c::kLog2e), round);
  const __m512 n = _mm512_sub_ps(t, round);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-c::kLn2Hi), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-c::kLn2Lo), r);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(c::kC6), r, _mm512_set1_ps(c::kC5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kC4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kC3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kC2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(round));
  const __m512i a = _mm512_srai_epi32(ni, 1), b = _mm512_sub_epi32(ni, a);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 sa = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(a, bias), 23));
  const __m512 sb = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(b, bias), 23));
  return _mm512_mul_ps(_mm512_mul_ps(p, sa), sb);
}

}  // namespace
}  // namespace moxi::kernels::x86
