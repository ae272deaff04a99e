// SIGINT/SIGTERM handling of moxi-train (see interrupt.h).
#include "moxi/train/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>

namespace moxi::train {

namespace {

std::string g_command;         // resume_command()
std::string g_stop_message;    // printed by a signal that stops the process at once
std::string g_finish_message;  // printed by the first signal inside the training loop
std::atomic<int> g_graceful{0};
std::atomic<int> g_requested{0};

void write_all(const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    const ssize_t n = ::write(2, s.data() + at, s.size() - at);
    if (n <= 0) return;
    at += size_t(n);
  }
}

extern "C" void on_signal(int sig) {
  const int saved_errno = errno;
  if (g_graceful.load() > 0 && g_requested.load() == 0) {
    g_requested.store(sig);
    write_all(g_finish_message);
    errno = saved_errno;
    return;
  }
  write_all(g_stop_message);
  die_of(sig);
}

}  // namespace

void install_interrupt_handlers(const std::string& command) {
  g_command = command;
  g_stop_message =
      "\nmoxi train: interrupted; the same command resumes the run from its last checkpoint:\n  " + command +
      "\n";
  g_finish_message =
      "\nmoxi train: interrupted; finishing this step and writing a checkpoint (interrupt again to stop "
      "now)\n";
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (const int sig : {SIGINT, SIGTERM}) {
    struct sigaction old = {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);  // a background job's SIGINT stays ignored
  }
}

const std::string& resume_command() {
  return g_command;
}

int interrupt_requested() {
  return g_requested.load();
}

graceful_interrupts::graceful_interrupts() {
  g_graceful.fetch_add(1);
}
graceful_interrupts::~graceful_interrupts() {
  g_graceful.fetch_sub(1);
}

void die_of(int sig) {
  struct sigaction sa = {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  ::sigaction(sig, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::sigprocmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);  // not reached: the default action of SIGINT/SIGTERM ends the process
}

std::string shell_quote(const std::string& w) {
  static const std::string safe = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%";
  if (!w.empty() && w.find_first_not_of(safe) == std::string::npos) return w;
  std::string out = "'";
  for (const char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace moxi::train
