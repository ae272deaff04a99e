// Elapsed wall time on the monotonic clock, for the timings that commands, benchmarks and the sandbox
// report (never for a test's pass/fail).
#pragma once

#include <chrono>

namespace moxi {

// Seconds from t0 to now on std::chrono::steady_clock.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace moxi
