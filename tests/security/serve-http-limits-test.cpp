// S2, S3, S8, S9: the request parser's limits against a real `moxi serve`, over raw sockets. A chunked body
// counts against --max-body-bytes like a Content-Length one (S2); header bytes and header fields are
// capped with 431 (S3); two different Content-Length values are a 400, never a second request (S8); a
// Content-Length beyond the limit is refused before any body byte is read (S9). The server's memory stays
// bounded throughout (VmRSS).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "security/serve-harness.h"

namespace moxi::serve {
namespace {

using namespace moxi::security_testing;
using nlohmann::json;

class serve_http_limits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    srv_ = new serve_process(
        {"--max-body-bytes", "1048576", "--max-header-bytes", "16384", "--max-header-count", "64"});
  }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  void SetUp() override { ASSERT_GT(srv_->port(), 0) << srv_->log(); }
  static serve_process* srv_;
};
serve_process* serve_http_limits::srv_ = nullptr;

std::string chunk(const std::string& data) {
  char size[32];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

TEST_F(serve_http_limits, ChunkedBodiesWithinTheLimitWork) {
  // ignore_eos: the sampled reply may end at once; max_tokens is what shows the chunked body was read whole.
  const std::string body = R"({"prompt": "hello", "max_tokens": 2, "ignore_eos": true})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: "
      "chunked\r\n\r\n" +
      chunk(body.substr(0, 10)) + chunk(body.substr(10)) + "0\r\n\r\n";
  const auto r = exchange(srv_->port(), req);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["usage"]["completion_tokens"], 2);
}

TEST_F(serve_http_limits, ChunkedBodyBeyondTheLimitIs413AndNotBuffered) {
  const double rss0 = srv_->rss_mib();
  const int fd = connect_to(srv_->port(), 5);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"));
  // Up to 50 MB, reading whatever the server answers as we go.
  const auto f = flood(fd, chunk(std::string(64 << 10, 'a')), 50u << 20);
  ::close(fd);
  EXPECT_EQ(f.reply.rfind("HTTP/1.1 413", 0), 0u) << f.reply.substr(0, 200);
  EXPECT_TRUE(f.closed);
  EXPECT_LT(f.sent, 50u << 20) << "the server read a 50 MB chunked body";
  EXPECT_LT(srv_->rss_mib() - rss0, 64) << "the body was buffered";
  EXPECT_EQ(health(srv_->port()), 200);
}

TEST_F(serve_http_limits, HeaderCountAndHeaderBytesAreCappedWith431) {
  // More fields than --max-header-count, each small.
  std::string many = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 65; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  auto r = exchange(srv_->port(), many + "\r\n");
  EXPECT_EQ(r.status, 431) << r.head;
  // 64 fields (Host + 63) are fine.
  std::string enough = "GET /health HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 63; ++i) enough += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(exchange(srv_->port(), enough + "\r\n").status, 200);
  // One field longer than --max-header-bytes.
  r = exchange(srv_->port(),
               "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(20000, 'b') + "\r\n\r\n");
  EXPECT_EQ(r.status, 431) << r.head;
  // The probe's two million headers: refused once the byte limit is passed, memory flat.
  const double rss0 = srv_->rss_mib();
  const int fd = connect_to(srv_->port(), 5);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n"));
  std::string block;
  for (int i = 0; i < 4096; ++i) block += "a: b\r\n";
  const auto f = flood(fd, block, 2000000u * 6);
  ::close(fd);
  EXPECT_EQ(f.reply.rfind("HTTP/1.1 431", 0), 0u) << f.reply.substr(0, 200);
  EXPECT_TRUE(f.closed);
  EXPECT_LT(f.sent, 2000000u * 6) << "the server took two million header fields";
  EXPECT_LT(srv_->rss_mib() - rss0, 64);
  EXPECT_EQ(health(srv_->port()), 200);
}

TEST_F(serve_http_limits, ConflictingContentLengthsAre400AndNothingIsSmuggled) {
  const std::string inner = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string body = R"({"prompt": "x", "max_tokens": 1})";
  const int fd = connect_to(srv_->port(), 5);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: " +
                           std::to_string(body.size()) + "\r\nContent-Length: " +
                           std::to_string(body.size() + inner.size()) + "\r\n\r\n" + body + inner));
  bool closed = false;
  const auto rs = read_responses(fd, 2, &closed);
  ::close(fd);
  ASSERT_GE(rs.size(), 1u);
  EXPECT_EQ(rs[0].status, 400) << rs[0].head;
  EXPECT_EQ(rs.size(), 1u) << "a second (smuggled) request was answered";
  EXPECT_TRUE(closed);
  // Content-Length with Transfer-Encoding: the other classic desync is refused too.
  const auto te =
      exchange(srv_->port(),
               "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: "
               "chunked\r\n\r\n0\r\n\r\n");
  EXPECT_EQ(te.status, 400) << te.head;
}

TEST_F(serve_http_limits, HugeContentLengthIsRefusedAtOnceAndClosed) {
  for (const std::string length : {"1000000000000", "100000000000000000000"}) {
    const int fd = connect_to(srv_->port(), 10);
    ASSERT_GE(fd, 0);
    // The header only: the server must answer without waiting for (or reading) any of the body.
    ASSERT_TRUE(
        send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + length + "\r\n\r\n"));
    bool closed = false;
    const auto rs = read_responses(fd, 1, &closed);
    ASSERT_EQ(rs.size(), 1u) << length;
    // 10^12 is a number too large (413); 10^20 does not fit 64 bits at all, a malformed header (400).
    EXPECT_EQ(rs[0].status, length.size() < 20 ? 413 : 400) << rs[0].head;
    EXPECT_TRUE(rs[0].close) << rs[0].head;
    bool eof = false;
    read_to_close(fd, &eof);
    EXPECT_TRUE(eof) << "the connection stayed open";
    ::close(fd);
  }
  EXPECT_EQ(health(srv_->port()), 200);
}

}  // namespace
}  // namespace moxi::serve
