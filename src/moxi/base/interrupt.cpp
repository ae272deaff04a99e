// The interrupt flag (see interrupt.h): the handler stores the signal in an atomic and writes one byte to
// a self-pipe that nobody reads, so the pipe stays readable and every poll() that watches it wakes.
#include "moxi/base/interrupt.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "moxi/base/error.h"

namespace moxi {
namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

std::atomic<int> g_signal{0};
std::atomic<int> g_read_fd{-1}, g_write_fd{-1};
std::atomic<bool> g_guarded{false};

constexpr int kSignals[] = {SIGINT, SIGTERM};
struct sigaction g_previous[2];
bool g_installed[2] = {false, false};

extern "C" void on_interrupt(int sig) {
  int none = 0;
  if (!g_signal.compare_exchange_strong(none, sig)) {
    // Asked again while stopping: end now, as the default disposition would have.
    ::signal(sig, SIG_DFL);
    ::raise(sig);  // blocked inside this handler, delivered as it returns
    return;
  }
  const int saved = errno;
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(g_write_fd.load(), &byte, 1);
  errno = saved;
}

void drain(int fd) {
  char buf[64];
  while (::read(fd, buf, sizeof buf) > 0) {
  }
}

}  // namespace

const char* interrupted::what() const noexcept {
  switch (signal_) {
    case SIGINT:
      return "interrupted by SIGINT";
    case SIGTERM:
      return "interrupted by SIGTERM";
    default:
      return "interrupted";
  }
}

interrupt_guard::interrupt_guard() {
  MOXI_ASSERT(!g_guarded.exchange(true), "one interrupt_guard at a time");
  if (g_read_fd.load() < 0) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
      g_guarded = false;
      throw io_error("pipe", "interrupt self-pipe", errno);
    }
    g_read_fd = p[0];
    g_write_fd = p[1];
  }
  drain(g_read_fd.load());
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sa.sa_flags = SA_RESTART;  // unrelated blocking calls carry on; the loops that care poll interrupt_fd()
  sigemptyset(&sa.sa_mask);
  for (int s : kSignals) sigaddset(&sa.sa_mask, s);
  for (int i = 0; i < 2; ++i) {
    g_installed[i] = false;
    if (::sigaction(kSignals[i], nullptr, &g_previous[i]) != 0) continue;
    if (!(g_previous[i].sa_flags & SA_SIGINFO) && g_previous[i].sa_handler == SIG_IGN) continue;
    g_installed[i] = ::sigaction(kSignals[i], &sa, nullptr) == 0;
  }
}

interrupt_guard::~interrupt_guard() {
  for (int i = 0; i < 2; ++i)
    if (g_installed[i]) ::sigaction(kSignals[i], &g_previous[i], nullptr);
  // The request ends with the guard (a moxi::interrupted in flight carries the signal): code that runs
  // afterwards, unguarded, must not stop for it.
  g_signal = 0;
  drain(g_read_fd.load());
  g_guarded = false;
}

bool interrupt_requested() noexcept {
  return g_signal.load(std::memory_order_relaxed) != 0;
}

int interrupt_signal() noexcept {
  return g_signal.load(std::memory_order_relaxed);
}

void check_interrupt() {
  if (const int s = interrupt_signal()) throw interrupted(s);
}

int interrupt_fd() noexcept {
  return g_read_fd.load(std::memory_order_relaxed);
}

}  // namespace moxi
