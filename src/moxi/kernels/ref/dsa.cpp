// Scalar reference DSA indexer kernels: scores and deterministic top-k (see dsa.h).
#include "moxi/kernels/ref/dsa.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/base/mx.h"

namespace moxi::kernels::ref {

void quantize_index_keys(const float* k, uint8_t* rows, int64_t T, int64_t D) {
  for (int64_t t = 0; t < T; ++t) {
    uint8_t* row = rows + t * index_key_bytes(D);
    const float scale = mx::quantize_fp8_row(k + t * D, size_t(D), row);
    std::memset(row + D, 0, size_t(index_key_scale_offset(D) - D));
    std::memcpy(row + index_key_scale_offset(D), &scale, 4);
  }
}

void dequantize_index_key(const uint8_t* row, int64_t D, float* out) {
  const float scale = index_key_scale(row, D);
  for (int64_t d = 0; d < D; ++d) out[d] = mx::kFp8E4m3[row[d]] * scale;
}

void indexer_scores(const float* q, const uint8_t* k, const float* w, float* scores, int64_t T, int64_t S,
                    int64_t HI, int64_t D) {
  MOXI_ASSERT(S >= T);
  const int64_t stride = index_key_bytes(D);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n = S - T + t + 1;
    float* row = scores + t * S;
    for (int64_t s = 0; s < S; ++s) {
      if (s >= n) {
        row[s] = -std::numeric_limits<float>::infinity();
        continue;
      }
      const uint8_t* ks = k + s * stride;
      const float scale = index_key_scale(ks, D);
      float acc = 0.0f;
      for (int64_t j = 0; j < HI; ++j) {
        const float* qj = q + (t * HI + j) * D;
        float dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) dot = std::fma(qj[d], mx::kFp8E4m3[ks[d]], dot);
        acc = std::fma(w[t * HI + j], std::max(dot * scale, 0.0f), acc);
      }
      row[s] = acc;
    }
  }
}

void indexer_topk(const float* scores, int32_t* indices, int64_t T, int64_t S, int64_t k) {
  MOXI_ASSERT(S >= T && k >= 0);
  std::vector<int32_t> cand(static_cast<size_t>(S));
  for (int64_t t = 0; t < T; ++t) {
    const float* row = scores + t * S;
    const int64_t n = S - T + t + 1;
    for (int64_t s = 0; s < n; ++s) cand[size_t(s)] = int32_t(s);
    auto before = [&](int32_t a, int32_t b) { return indexer_ranks_before(row[a], a, row[b], b); };
    const int64_t m = std::min(n, k);
    std::partial_sort(cand.begin(), cand.begin() + m, cand.begin() + n, before);
    int32_t* out = indices + t * k;
    for (int64_t j = 0; j < k; ++j) out[j] = j < m ? cand[size_t(j)] : -1;
  }
}

}  // namespace moxi::kernels::ref
