// base/interrupt.h with real signals: under a guard SIGINT/SIGTERM only set the flag (and make
// interrupt_fd() readable) and check_interrupt() throws moxi::interrupted carrying the signal; the guard
// restores the previous dispositions, leaves an ignored signal ignored, and a second signal ends the
// process as the default disposition would.
#include "moxi/base/interrupt.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <exception>
#include <string>

namespace {

bool readable(int fd) {
  pollfd p = {fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

std::atomic<int> g_custom{0};
extern "C" void custom_handler(int) {
  g_custom = 1;
}

TEST(Interrupt, SignalSetsTheFlagAndCheckThrows) {
  for (int sig : {SIGINT, SIGTERM}) {
    moxi::interrupt_guard guard;
    EXPECT_FALSE(moxi::interrupt_requested());
    EXPECT_NO_THROW(moxi::check_interrupt());
    ASSERT_GE(moxi::interrupt_fd(), 0);
    EXPECT_FALSE(readable(moxi::interrupt_fd()));
    ASSERT_EQ(::raise(sig), 0);  // the process survives: the handler only records it
    EXPECT_TRUE(moxi::interrupt_requested());
    EXPECT_EQ(moxi::interrupt_signal(), sig);
    EXPECT_TRUE(readable(moxi::interrupt_fd()));
    EXPECT_TRUE(readable(moxi::interrupt_fd())) << "stays readable: every poller wakes";
    try {
      moxi::check_interrupt();
      ADD_FAILURE() << "check_interrupt() did not throw";
    } catch (const moxi::interrupted& e) {
      EXPECT_EQ(e.signal(), sig);
      EXPECT_EQ(std::string(e.what()), sig == SIGINT ? "interrupted by SIGINT" : "interrupted by SIGTERM");
    }
  }
}

TEST(Interrupt, NotCaughtAsStdException) {
  moxi::interrupt_guard guard;
  ::raise(SIGINT);
  bool as_std = false, as_interrupted = false;
  try {
    try {
      moxi::check_interrupt();
    } catch (const std::exception&) {
      as_std = true;  // a per-item error handler must not swallow the request to stop
    }
  } catch (const moxi::interrupted&) {
    as_interrupted = true;
  }
  EXPECT_FALSE(as_std);
  EXPECT_TRUE(as_interrupted);
}

TEST(Interrupt, NewGuardStartsClearAndRestoresThePreviousHandler) {
  struct sigaction sa {
  }, old{};
  sa.sa_handler = custom_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(::sigaction(SIGTERM, &sa, &old), 0);
  {
    moxi::interrupt_guard guard;
    ::raise(SIGTERM);
    EXPECT_TRUE(moxi::interrupt_requested());
    EXPECT_EQ(g_custom.load(), 0) << "the guard's handler, not the previous one, ran";
  }
  {
    moxi::interrupt_guard guard;
    EXPECT_FALSE(moxi::interrupt_requested()) << "a new guard starts with no interrupt";
    EXPECT_FALSE(readable(moxi::interrupt_fd()));
  }
  EXPECT_FALSE(moxi::interrupt_requested()) << "the request ends with its guard";
  EXPECT_NO_THROW(moxi::check_interrupt());
  ::raise(SIGTERM);
  EXPECT_EQ(g_custom.load(), 1) << "the previous handler is back";
  ::sigaction(SIGTERM, &old, nullptr);
}

TEST(Interrupt, IgnoredSignalStaysIgnored) {
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  ASSERT_EQ(::sigaction(SIGINT, &ign, &old), 0);
  {
    moxi::interrupt_guard guard;
    ::raise(SIGINT);
    EXPECT_FALSE(moxi::interrupt_requested()) << "nohup-style ignored SIGINT must stay ignored";
    ::raise(SIGTERM);
    EXPECT_EQ(moxi::interrupt_signal(), SIGTERM);
  }
  ::sigaction(SIGINT, &old, nullptr);
}

TEST(InterruptDeathTest, SecondSignalEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        moxi::interrupt_guard guard;
        ::raise(SIGINT);
        if (!moxi::interrupt_requested()) std::_Exit(3);
        ::raise(SIGTERM);  // asked again while stopping: the default disposition
        std::_Exit(4);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

}  // namespace
