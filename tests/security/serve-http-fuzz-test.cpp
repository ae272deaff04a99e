// A seeded fuzzer of the HTTP layer against a real `moxi serve`: valid requests (health, models, small
// completions, chunked and not) mutated the ways the probe's findings were built (duplicated or
// conflicting Content-Length, Content-Length with Transfer-Encoding, bad chunk sizes, oversized and
// numerous headers, deep JSON, HTTP/1.0, pipelined batches, random cuts and byte flips), each sent on a
// fresh connection. Properties, whatever the input: the server never dies; every response it sends parses
// as HTTP with a known status; it never answers more requests than were sent; a request refused for its
// framing ends the connection (nothing after it is read as a request); and /health works afterwards.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "security/serve-harness.h"

namespace moxi::serve {
namespace {

using namespace moxi::security_testing;

std::string chunked(const std::string& body, std::mt19937& rng) {
  std::string out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t n = std::min(body.size() - pos, size_t(1 + rng() % 16));
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", n);
    out += size + body.substr(pos, n) + "\r\n";
    pos += n;
  }
  return out + "0\r\n\r\n";
}

// One request, valid or mutated; `framing` is set when the mutation breaks the message framing.
std::string make_request(std::mt19937& rng, bool& framing) {
  const std::string body =
      rng() % 2 ? R"({"prompt": "fuzz", "max_tokens": 1})" : R"({"prompt": [5, 6], "max_tokens": 2})";
  const int kind = int(rng() % 12);
  const std::string version = rng() % 5 == 0 ? "HTTP/1.0" : "HTTP/1.1";
  std::string head = "POST /v1/completions " + version + "\r\nHost: x\r\nContent-Type: application/json\r\n";
  framing = false;
  switch (kind) {
    case 0:
      return "GET /health " + version + "\r\nHost: x\r\n\r\n";
    case 1:
      return "GET /v1/models " + version + "\r\nHost: x\r\n\r\n";
    case 2:  // plain
      return head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    case 3:  // chunked
      return head + "Transfer-Encoding: chunked\r\n\r\n" + chunked(body, rng);
    case 4: {  // two Content-Length values that differ
      framing = true;
      return head + "Content-Length: " + std::to_string(body.size()) +
             "\r\nContent-Length: " + std::to_string(body.size() + 1 + rng() % 50) + "\r\n\r\n" + body;
    }
    case 5:  // Content-Length and Transfer-Encoding
      framing = true;
      return head + "Content-Length: " + std::to_string(body.size()) +
             "\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(body, rng);
    case 6: {  // a bad chunk size
      framing = true;
      const char* bad[] = {"zz", "-1", "ffffffffffffffffff", "1 1", ""};
      return head + "Transfer-Encoding: chunked\r\n\r\n" + bad[rng() % 5] + "\r\nab\r\n0\r\n\r\n";
    }
    case 7: {  // too many header fields
      framing = true;
      std::string h = head;
      for (int i = 0; i < 101 + int(rng() % 500); ++i) h += "X-" + std::to_string(i) + ": v\r\n";
      return h + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    }
    case 8:  // a header beyond the byte limit
      framing = true;
      return head + "X-Big: " + std::string(70000 + rng() % 10000, 'x') + "\r\n\r\n";
    case 9: {  // deep JSON
      const int depth = 65 + int(rng() % 5000);
      const std::string deep = R"({"prompt": "x", "extra": )" + std::string(size_t(depth), '[') +
                               std::string(size_t(depth), ']') + "}";
      return head + "Content-Length: " + std::to_string(deep.size()) + "\r\n\r\n" + deep;
    }
    case 10: {  // a Content-Length beyond the body limit, no body
      framing = true;
      return head + "Content-Length: " + std::to_string((1u << 20) + 1 + rng() % 1000000) + "\r\n\r\n";
    }
    default: {  // byte flips in the request line or header
      std::string r = head + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      const size_t head_len = head.size();
      for (int i = 0; i < 1 + int(rng() % 3); ++i) r[rng() % head_len] = char(rng() % 256);
      return r;  // it may still parse (a flipped header value), or end the connection with a 400
    }
  }
}

TEST(serve_http_fuzz, MutatedAndPipelinedRequestsNeverBreakTheServer) {
  serve_process srv({});
  ASSERT_GT(srv.port(), 0) << srv.log();
  // 499: a completion whose client half-closed (SHUT_WR below) before it finished counts as gone.
  const std::set<int> known = {200, 400, 404, 405, 413, 429, 431, 499, 503};
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 150; ++trial) {
    // One to four requests back to back on one connection, sometimes cut at a random byte.
    const int n = 1 + int(rng() % 4);
    std::string batch;
    int until_framing = n;  // requests up to and including the first framing breaker
    for (int i = 0; i < n; ++i) {
      bool framing = false;
      batch += make_request(rng, framing);
      if (framing && until_framing == n) until_framing = i + 1;
    }
    const bool cut = rng() % 6 == 0;
    if (cut) batch.resize(rng() % batch.size());
    const int fd = connect_to(srv.port(), 10);
    ASSERT_GE(fd, 0) << "trial " << trial << "\n" << srv.log();
    send_all(fd, batch);
    ::shutdown(fd, SHUT_WR);  // nothing more comes: the server answers what it has, then closes
    bool closed = false;
    std::string raw = read_to_close(fd, &closed);
    ::close(fd);
    EXPECT_TRUE(closed) << "trial " << trial << ": the server kept the connection";
    int answered = 0;
    while (!raw.empty()) {
      auto r = take_response(raw, true);
      ASSERT_TRUE(r) << "trial " << trial << ": not HTTP: " << raw.substr(0, 200);
      EXPECT_TRUE(known.count(r->status)) << "trial " << trial << ": status " << r->status;
      ++answered;
    }
    EXPECT_LE(answered, cut ? n : until_framing) << "trial " << trial;
    ASSERT_FALSE(srv.exited()) << "trial " << trial << "\n" << srv.log();
  }
  EXPECT_EQ(health(srv.port()), 200);
}

}  // namespace
}  // namespace moxi::serve
