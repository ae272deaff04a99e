// The register-resident loop behind the benchmarks' compute ceilings (`moxi bench gemm`): 24 independent
// accumulators (more than latency x throughput on current cores) updated by one instruction each per
// iteration, operands in registers. Include it ONLY from translation units built with at least -mavx512f;
// internal linkage, so each gets its own copy built with its own -m flags (as mxfp4-avx512-inl.h).
#pragma once

#if !defined(__AVX512F__)
#error "peak-loop-inl.h needs a translation unit built with -mavx512f"
#endif

#include <immintrin.h>

#include <cstdint>

namespace moxi::kernels::x86 {
namespace {

// iters x 24 updates acc = step(acc); returns the sum of every lane, which depends on every result.
template <class Step>
double register_peak_loop(int64_t iters, Step step) {
  __m512 acc[24];
#pragma GCC unroll 32
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(float(i));
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 32
    for (int i = 0; i < 24; ++i) acc[i] = step(acc[i]);
    __asm__ volatile("" : "+v"(acc[0]), "+v"(acc[1]), "+v"(acc[2]), "+v"(acc[3]));  // keep the loop
  }
  __m512 s = acc[0];
#pragma GCC unroll 32
  for (int i = 1; i < 24; ++i) s = _mm512_add_ps(s, acc[i]);
  float lanes[16];
  _mm512_storeu_ps(lanes, s);
  double sum = 0;
  for (float v : lanes) sum += double(v);
  return sum;
}

}  // namespace
}  // namespace moxi::kernels::x86
