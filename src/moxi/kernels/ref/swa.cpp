// Scalar reference sliding-window attention (see swa.h): per query and head, max-subtracted softmax over
// the visible keys in key order, f32 accumulation.
#include "moxi/kernels/ref/swa.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "moxi/base/error.h"

namespace moxi::kernels::ref {

void sliding_window_attention(const float* q, const float* k, const float* v, float* o, int64_t T, int64_t S,
                              int64_t H, int64_t KVH, int64_t D, int64_t window, float scale) {
  MOXI_ASSERT(S >= T && window >= 1 && KVH >= 1 && H % KVH == 0);
  const int64_t group = H / KVH;
  std::vector<float> p(size_t(std::min(S, window)));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t i = S - T + t;                                 // the query's own key index
    const int64_t first = std::max<int64_t>(0, i - window + 1);  // oldest visible key
    const int64_t n = i - first + 1;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      const float* qh = q + (t * H + h) * D;
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        const float* ks = k + ((first + j) * KVH + g) * D;
        float acc = 0.0f;
        for (int64_t d = 0; d < D; ++d) acc += qh[d] * ks[d];
        p[size_t(j)] = acc * scale;
        mx = std::max(mx, p[size_t(j)]);
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        p[size_t(j)] = std::exp(p[size_t(j)] - mx);
        sum += p[size_t(j)];
      }
      float* oh = o + (t * H + h) * D;
      std::fill(oh, oh + D, 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const float w = p[size_t(j)] / sum;
        const float* vs = v + ((first + j) * KVH + g) * D;
        for (int64_t d = 0; d < D; ++d) oh[d] += w * vs[d];
      }
    }
  }
}

}  // namespace moxi::kernels::ref
