// Scalar reference MXFP4 matmul: decode 8 weight rows to fp32, then reuse ref::matmul's 8-wide loop so the
// summation order (and the result, bit for bit) is that of ref::matmul on the dequantized weights.
#include "moxi/kernels/ref/mxfp4.h"

#include <vector>

#include "moxi/base/error.h"
#include "moxi/base/mx.h"
#include "moxi/kernels/ref/basic.h"

namespace moxi::kernels::ref {

void matmul_mxfp4(const float* x, const uint8_t* blocks, const uint8_t* scales, float* y, int64_t T,
                  int64_t N, int64_t K, act_quant act) {
  MOXI_ASSERT(K % mx::kBlock == 0 && T >= 0 && N >= 0);
  if (T == 0 || N == 0) return;
  const int64_t nb = K / mx::kBlock;  // blocks per row
  // Scratch once per call, never inside the loops (kernels.md contract).
  std::vector<float> xq;
  if (act != act_quant::NONE) {
    const mx::elem_format f =
        act == act_quant::MXFP8_E4M3 ? mx::elem_format::FP8_E4M3 : mx::elem_format::FP8_E5M2;
    xq.resize(size_t(T * K));
    for (int64_t t = 0; t < T; ++t) mx::fake_quantize(f, x + t * K, size_t(K), xq.data() + t * K);
    x = xq.data();
  }
  constexpr int64_t kRows = 8;  // rows decoded at once: 8*K floats stay in L2 even for K = 16k
  std::vector<float> w(size_t(kRows * K)), yt(size_t(T * kRows));
  for (int64_t n0 = 0; n0 < N; n0 += kRows) {
    const int64_t rows = N - n0 < kRows ? N - n0 : kRows;
    for (int64_t r = 0; r < rows; ++r)
      mx::dequantize_mxfp4(blocks + (n0 + r) * nb * 16, scales + (n0 + r) * nb, size_t(K), w.data() + r * K);
    matmul(x, w.data(), nullptr, yt.data(), T, rows, K);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < rows; ++r) y[t * N + n0 + r] = yt[size_t(t * rows + r)];
  }
}

}  // namespace moxi::kernels::ref
