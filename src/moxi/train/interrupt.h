// Interrupting `moxi-train` (Ctrl-C = SIGINT, or SIGTERM) never ends a run without a word. Inside the
// training loop (a graceful_interrupts scope) the first signal asks the loop to finish its step, write a
// checkpoint and stop (it throws `interrupted`); anywhere else, or at a second signal, the process prints
// how to resume at once and dies of the signal (the shell sees 130 for SIGINT). Either way the message names
// the command that resumes the run: the same command line.
#pragma once

#include <stdexcept>
#include <string>

namespace moxi::train {

// Installs the SIGINT/SIGTERM handlers; resume_command is the command line that resumes the run (printed
// by the handler, so it is built now: a signal handler may not allocate).
void install_interrupt_handlers(const std::string& resume_command);
const std::string& resume_command();

// The signal that asked for a stop at the next step boundary, or 0.
int interrupt_requested();

// While one is alive, the first signal only sets interrupt_requested(); outside, a signal stops at once.
class graceful_interrupts {
 public:
  graceful_interrupts();
  ~graceful_interrupts();
  graceful_interrupts(const graceful_interrupts&) = delete;
  graceful_interrupts& operator=(const graceful_interrupts&) = delete;
};

// Thrown by the training loop after it has checkpointed on a requested stop; main prints what() and dies of
// the signal (die_of).
struct interrupted : std::runtime_error {
  interrupted(int sig, const std::string& message) : std::runtime_error(message), signal(sig) {}
  int signal;
};

// Restores the default action of sig and raises it: the process ends as killed by sig.
[[noreturn]] void die_of(int sig);

// A shell word: unchanged when it needs no quoting, else in single quotes.
std::string shell_quote(const std::string& word);

}  // namespace moxi::train
