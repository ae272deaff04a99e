// Errors in three tiers (docs/design.md §3): MOXI_ASSERT for internal invariants (on in release builds,
// aborts with file:line); moxi::error for user, config and file problems (the message names the file,
// tensor, field or request and what was expected), caught once at each boundary; io_error adds errno;
// usage_error, a moxi::error that is the command line's fault.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace moxi {

// A user-facing failure: bad input, bad file, bad config. The message is complete and ready to print.
class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
};

// A bad command line found after parsing (a missing input, an output that exists without --force, options
// that contradict each other): the `moxi` binary prints it like a parse error and exits with status 2.
class usage_error : public error {
 public:
  explicit usage_error(const std::string& what) : error(what) {}
};

// A failed system call on a path; the message carries the path, the operation and strerror(errno).
error io_error(const std::string& op, const std::string& path, int errno_value);

[[noreturn]] inline void assert_fail(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "moxi: internal error at %s:%d: assertion `%s` failed%s%s\n", file, line, expr,
               msg[0] ? ": " : "", msg);
  std::abort();
}

}  // namespace moxi

#define MOXI_ASSERT(cond, ...) \
  ((cond) ? (void)0 : ::moxi::assert_fail(#cond, __FILE__, __LINE__, "" __VA_ARGS__))
