// SIGINT/SIGTERM as a request to stop cleanly (docs/design.md §3). While an interrupt_guard lives, the
// two signals only set a process-wide flag and make interrupt_fd() readable; long loops poll
// interrupt_requested() or call check_interrupt(), which throws moxi::interrupted, so that the stack
// unwinds through its owners (temporary directories, sandbox runs, checkpoint writers) and each removes
// what it made. The CLI maps moxi::interrupted to exit status 128 + signal (130 for SIGINT). A second
// SIGINT or SIGTERM while the first is being handled ends the process at once, as if no guard were there.
#pragma once

namespace moxi {

// Thrown by check_interrupt(). Deliberately not a std::exception: code that turns a failure into a
// per-item error (`catch (const std::exception&)`) must not swallow a request to stop; catch (...) with
// a rethrow, or RAII, is what runs on the way out.
class interrupted {
 public:
  explicit interrupted(int signal) : signal_(signal) {}
  int signal() const { return signal_; }
  // "interrupted by SIGINT" / "interrupted by SIGTERM".
  const char* what() const noexcept;

 private:
  int signal_;
};

// Installs the SIGINT and SIGTERM handlers for its lifetime and restores the previous dispositions when
// destroyed; no interrupt is requested before or after it (the exception carries the signal). A signal that
// was ignored when the guard was made (a background job of a non-interactive shell, nohup) stays ignored. One
// guard at a time (a CLI command).
class interrupt_guard {
 public:
  interrupt_guard();
  ~interrupt_guard();
  interrupt_guard(const interrupt_guard&) = delete;
  interrupt_guard& operator=(const interrupt_guard&) = delete;
};

// True once SIGINT or SIGTERM arrived under the guard (async-signal-safe, one atomic load).
bool interrupt_requested() noexcept;
// The signal that asked to stop, 0 when none.
int interrupt_signal() noexcept;
// Throws moxi::interrupted when an interrupt was requested.
void check_interrupt();
// A descriptor that polls readable (POLLIN) once an interrupt was requested, for loops that sleep in
// poll(); -1 when no guard was ever made. Never read it.
int interrupt_fd() noexcept;

}  // namespace moxi
