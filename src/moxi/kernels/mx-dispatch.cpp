// MX fake-quantization dispatch: block scales by the reference's own mx::block_scale, elements by the
// AVX-512 twin where the CPU has AVX-512 and the format is FP8; everything else is mx::fake_quantize.
#include "moxi/kernels/mx-dispatch.h"

#include <cstdint>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/kernels/x86/cpu.h"

namespace moxi::kernels {

#if defined(__x86_64__)
namespace x86 {
// kernels/x86/mx-avx512.cpp: x f32 [n], scales u8 [n / 32] from mx::block_scale.
void fake_quantize_fp8_avx512(bool e4m3, const float* x, const uint8_t* scales, int64_t n, float* out);
}  // namespace x86
#endif

void fake_quantize(mx::elem_format f, const float* x, size_t n, float* out) {
#if defined(__x86_64__)
  if (f != mx::elem_format::FP4_E2M1 && x86::cpu().avx512) {
    MOXI_ASSERT(n % mx::kBlock == 0, "MX rows must be a multiple of the 32-element block");
    thread_local std::vector<uint8_t> scales;
    if (scales.size() < n / mx::kBlock) scales.resize(n / mx::kBlock);
    for (size_t b = 0; b < n / mx::kBlock; ++b) scales[b] = mx::block_scale(f, x + b * mx::kBlock);
    x86::fake_quantize_fp8_avx512(f == mx::elem_format::FP8_E4M3, x, scales.data(), int64_t(n), out);
    return;
  }
#endif
  mx::fake_quantize(f, x, n, out);
}

}  // namespace moxi::kernels
