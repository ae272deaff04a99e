// A progress line for long jobs (init, quantize): done/total, rate and ETA on stderr, redrawn in place
// on a terminal and printed at most every few seconds otherwise, so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace moxi {

class progress {
 public:
  // `what` names the job ("quantize"), `unit` the counted thing ("B" for bytes is shown as GB/s).
  progress(std::string what, uint64_t total, bool bytes);
  void advance(uint64_t n, const std::string& item = {});
  void finish();
  ~progress();

 private:
  void draw(bool final_line);
  std::string what_;
  uint64_t total_, done_ = 0;
  bool bytes_, tty_, finished_ = false;
  std::string item_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace moxi
