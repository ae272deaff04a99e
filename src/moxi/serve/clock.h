// clock: the one monotonic clock of the serving layer and its seconds helpers (server, metrics, bench).
#pragma once

#include <chrono>

namespace moxi::serve {

using clock_type = std::chrono::steady_clock;

inline double seconds_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
inline double seconds_since(clock_type::time_point t) {
  return seconds_between(t, clock_type::now());
}

}  // namespace moxi::serve
