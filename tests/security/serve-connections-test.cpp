// S5 and S6: connections that hold the server without sending a request. A header trickled a byte at a
// time is cut at the header deadline, and SIGTERM ends the server within --drain-timeout (plus its 1 s
// grace) whatever its connections are doing (S5). A thousand idle keep-alive connections are all held open
// at once while /health is still answered on a new one (S6). Against a real `moxi serve`.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <regex>
#include <string>
#include <thread>

#include "security/serve-harness.h"

namespace moxi::serve {
namespace {

using namespace moxi::security_testing;

// Sends `text` one byte every `gap`, from a thread, until done or the server closes the connection.
struct trickler {
  int fd;
  std::atomic<bool> cut{false}, finished{false};
  std::thread t;
  trickler(int port, std::string text, std::chrono::milliseconds gap) : fd(connect_to(port, 1)) {
    t = std::thread([this, text = std::move(text), gap] {
      for (char c : text) {
        if (!send_all(fd, std::string_view(&c, 1))) {
          cut = true;
          return;
        }
        // A close by the server shows as end of stream (or a reset) on our side.
        char b;
        const ssize_t n = ::recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
          cut = true;
          return;
        }
        std::this_thread::sleep_for(gap);
      }
      finished = true;
    });
  }
  ~trickler() {
    if (t.joinable()) t.join();
    ::close(fd);
  }
};

// 120 header bytes at one per 250 ms take 30 s to arrive.
const std::string slow_header =
    "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(80, 's') + "\r\n\r\n";

TEST(serve_connections, TrickledHeaderIsCutAtTheHeaderDeadline) {
  serve_process srv({"--header-timeout", "2"});
  ASSERT_GT(srv.port(), 0) << srv.log();
  trickler slow(srv.port(), slow_header, std::chrono::milliseconds(250));
  ASSERT_GE(slow.fd, 0);
  // The server answers others meanwhile, and cuts the trickle before its header is complete.
  EXPECT_EQ(health(srv.port()), 200);
  slow.t.join();
  EXPECT_TRUE(slow.cut) << "the whole trickled header was accepted";
  EXPECT_FALSE(slow.finished);
}

TEST(serve_connections, SigtermEndsTheServerWithinTheDrainDeadlineWhateverItsClientsDo) {
  serve_process srv({"--drain-timeout", "1"});
  ASSERT_GT(srv.port(), 0) << srv.log();
  // A slowloris header, a body promised and trickled, an idle keep-alive connection, and a stream that
  // is never read.
  trickler header(srv.port(), slow_header, std::chrono::milliseconds(250));
  trickler body(
      srv.port(),
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + std::string(100, ' '),
      std::chrono::milliseconds(250));
  const int idle = connect_to(srv.port());
  ASSERT_TRUE(send_all(idle, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_EQ(read_responses(idle, 1).size(), 1u);
  const int unread = connect_to(srv.port());
  ASSERT_TRUE(send_all(unread, post_request("/v1/completions", R"({"prompt": "x", "max_tokens": 1000, )"
                                                               R"("stream": true, "ignore_eos": true})")));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_EQ(::kill(srv.pid(), SIGTERM), 0);
  // The trickles need 30 s; the server must be gone long before either ends.
  const auto status = srv.wait_exit(15);
  ASSERT_TRUE(status) << "still running 15 s after SIGTERM with --drain-timeout 1\n" << srv.log();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << srv.log();
  EXPECT_FALSE(header.finished);
  EXPECT_FALSE(body.finished);
  ::close(idle);
  ::close(unread);
}

TEST(serve_connections, ThousandIdleKeepAliveConnectionsDoNotStarveRequests) {
  serve_process srv({"--keep-alive-timeout", "120", "--header-timeout", "120"});
  ASSERT_GT(srv.port(), 0) << srv.log();
  constexpr int kIdle = 1000;
  // This process holds them too: its soft descriptor limit (1024 on many hosts) goes up to the hard one.
  rlimit lim{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  ASSERT_GT(lim.rlim_max, rlim_t(kIdle + 64)) << "the host allows too few descriptors for this test";
  std::vector<int> fds;
  for (int i = 0; i < kIdle; ++i) {
    const int fd = connect_to(srv.port());
    ASSERT_GE(fd, 0) << i;
    // Half made a request and wait on keep-alive; half never sent anything.
    if (i % 2 == 0) {
      ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
      ASSERT_EQ(read_responses(fd, 1).size(), 1u) << i;
    }
    fds.push_back(fd);
  }
  // All of them are held open at once, and a new request is answered (each exchange bounded by the
  // harness's receive timeout).
  for (int k = 0; k < 20; ++k) EXPECT_EQ(health(srv.port()), 200);
  const auto m = exchange(srv.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  std::smatch match;
  ASSERT_TRUE(std::regex_search(m.body, match, std::regex("moxi:http_connections\\{[^}]*\\} ([0-9]+)")))
      << m.body;
  EXPECT_GE(std::stoi(match[1]), kIdle + 1);
  // And each idle connection still works.
  for (int i = 0; i < kIdle; i += 97) {
    ASSERT_TRUE(send_all(fds[size_t(i)], "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
    const auto r = read_responses(fds[size_t(i)], 1);
    ASSERT_EQ(r.size(), 1u) << i;
    EXPECT_EQ(r[0].status, 200);
  }
  for (int fd : fds) ::close(fd);
}

TEST(serve_connections, ConnectionsBeyondTheCapGet503) {
  serve_process srv({"--max-connections", "8", "--keep-alive-timeout", "120", "--header-timeout", "120"});
  ASSERT_GT(srv.port(), 0) << srv.log();
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) held.push_back(connect_to(srv.port()));
  // Let the server register them before the next one arrives.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int extra = connect_to(srv.port());
  ASSERT_GE(extra, 0);
  const auto r = read_responses(extra, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, 503);
  ::close(extra);
  for (int fd : held) ::close(fd);
  // Once they are gone, requests are served again.
  bool ok = false;
  for (int i = 0; i < 50 && !ok; ++i) {
    ok = health(srv.port()) == 200;
    if (!ok) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace moxi::serve
