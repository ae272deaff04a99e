// Progress line implementation (see progress.h).
#include "moxi/base/progress.h"

#include <unistd.h>

#include <cstdio>

namespace moxi {

progress::progress(std::string what, uint64_t total, bool bytes)
    : what_(std::move(what)),
      total_(total),
      bytes_(bytes),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

progress::~progress() {
  if (!finished_ && done_ > 0 && tty_) std::fputc('\n', stderr);
}

void progress::advance(uint64_t n, const std::string& item) {
  done_ += n;
  item_ = item;
  const auto now = std::chrono::steady_clock::now();
  const auto every = tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(5000);
  if (now - last_draw_ >= every) {
    last_draw_ = now;
    draw(false);
  }
}

void progress::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

void progress::draw(bool final_line) {
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ ? double(done_) / double(total_) : 1.0;
  const double rate = secs > 0 ? double(done_) / secs : 0.0;
  const double eta = rate > 0 && total_ > done_ ? double(total_ - done_) / rate : 0.0;
  char bar[21];
  const int filled = int(frac * 20);
  for (int i = 0; i < 20; ++i) bar[i] = i < filled ? '#' : '.';
  bar[20] = 0;
  char rate_text[48];
  if (bytes_)
    std::snprintf(rate_text, sizeof rate_text, "%.2f/%.2f GB, %.2f GB/s", double(done_) / 1e9,
                  double(total_) / 1e9, rate / 1e9);
  else
    std::snprintf(rate_text, sizeof rate_text, "%llu/%llu, %.1f/s", (unsigned long long)done_,
                  (unsigned long long)total_, rate);
  std::string item = item_.size() > 48 ? "..." + item_.substr(item_.size() - 45) : item_;
  std::fprintf(stderr, "%s%s [%s] %5.1f%% %s, %s %.0fs %s%s", tty_ ? "\r\033[K" : "", what_.c_str(), bar,
               100.0 * frac, rate_text, final_line ? "took" : "eta", final_line ? secs : eta,
               final_line ? "" : item.c_str(), (final_line || !tty_) ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace moxi
