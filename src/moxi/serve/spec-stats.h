// Speculative decoding counters of the serving executor (vLLM's spec_decode metrics), kept apart so that
// metrics.h does not depend on the executor.
#pragma once

#include <cstdint>
#include <vector>

namespace moxi::serve {

// Verify steps that had drafts, drafts verified, drafts kept, and kept drafts by their position in the
// step (accepted_at[j]: the (j+1)-th draft of a step kept).
struct draft_stats {
  int64_t steps = 0, drafted = 0, accepted = 0;
  std::vector<int64_t> accepted_at;
};

}  // namespace moxi::serve
