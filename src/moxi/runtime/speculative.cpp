// Speculative sampling's accept / resample rule (speculative.h).
#include "moxi/runtime/speculative.h"

#include <algorithm>
#include <vector>

#include "moxi/base/error.h"
#include "moxi/runtime/sampler.h"

namespace moxi::runtime {

draft_verdict accept_draft(std::span<const double> p, std::span<const double> q, token_id d, double u_accept,
                           double u_resample) {
  if (p.size() != q.size() || d < 0 || size_t(d) >= p.size())
    throw error("speculative: distributions of different sizes or a draft outside the vocabulary");
  const double pd = p[size_t(d)], qd = q[size_t(d)];
  if (qd <= 0) throw error("speculative: the draft has no mass in its own distribution");
  if (u_accept < std::min(1.0, pd / qd)) return {d, true};
  // Residual max(0, p - q); draw_from works on unnormalized mass once scaled by the total.
  std::vector<double> r(p.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += r[i] = std::max(0.0, p[i] - q[i]);
  if (total <= 0) return {d, true};  // p == q up to rounding: the draft was as good as p's own draw
  for (auto& x : r) x /= total;
  return {draw_from(r, u_resample), false};
}

}  // namespace moxi::runtime
