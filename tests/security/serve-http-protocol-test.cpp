// S4 and S7: pipelined requests on one connection are all answered, in order (S4); an HTTP/1.0 client gets
// responses it can read: a Content-Length body, and a stream without chunked encoding that ends when the
// connection closes (S7). Against a real `moxi serve`, over raw sockets.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "security/serve-harness.h"

namespace moxi::serve {
namespace {

using namespace moxi::security_testing;
using nlohmann::json;

class serve_http_protocol : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { srv_ = new serve_process({}); }
  static void TearDownTestSuite() {
    delete srv_;
    srv_ = nullptr;
  }
  void SetUp() override { ASSERT_GT(srv_->port(), 0) << srv_->log(); }
  static serve_process* srv_;
};
serve_process* serve_http_protocol::srv_ = nullptr;

TEST_F(serve_http_protocol, PipelinedRequestsAreAllAnsweredInOrder) {
  const std::string completion =
      post_request("/v1/completions", R"({"prompt": "pipelined", "max_tokens": 3, "ignore_eos": true})");
  const std::string health_req = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string models = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string last = "GET /nothing-here HTTP/1.1\r\nHost: x\r\n\r\n";
  const int fd = connect_to(srv_->port());
  ASSERT_GE(fd, 0);
  // All in one write: the server sees them back to back in one read.
  ASSERT_TRUE(send_all(fd, health_req + completion + models + completion + last));
  const auto rs = read_responses(fd, 5);
  ASSERT_EQ(rs.size(), 5u);
  EXPECT_EQ(rs[0].status, 200);
  EXPECT_EQ(json::parse(rs[0].body)["status"], "ok");
  EXPECT_EQ(rs[1].status, 200);
  EXPECT_EQ(json::parse(rs[1].body)["usage"]["completion_tokens"], 3);
  EXPECT_EQ(rs[2].status, 200);
  EXPECT_EQ(json::parse(rs[2].body)["object"], "list");
  EXPECT_EQ(rs[3].status, 200);
  EXPECT_EQ(json::parse(rs[3].body)["usage"]["completion_tokens"], 3);
  EXPECT_EQ(rs[4].status, 404);
  // The connection is still usable afterwards.
  ASSERT_TRUE(send_all(fd, health_req));
  const auto again = read_responses(fd, 1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].status, 200);
  ::close(fd);
}

TEST_F(serve_http_protocol, PipelinedRequestsSplitAtOddPlacesStillParse) {
  const std::string two = "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
  for (size_t cut : {size_t(5), size_t(30), size_t(35), size_t(40), two.size() - 3}) {
    const int fd = connect_to(srv_->port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, two.substr(0, cut)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_TRUE(send_all(fd, two.substr(cut)));
    const auto rs = read_responses(fd, 2);
    ASSERT_EQ(rs.size(), 2u) << cut;
    EXPECT_EQ(rs[0].status, 200);
    EXPECT_EQ(rs[1].status, 200);
    EXPECT_EQ(json::parse(rs[1].body)["object"], "list");
    ::close(fd);
  }
}

TEST_F(serve_http_protocol, Http10ClientsGetBodiesTheyCanRead) {
  // Non-streaming: a Content-Length body, then the connection closes (no keep-alive asked for).
  const int fd = connect_to(srv_->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(
      send_all(fd, post_request("/v1/completions", R"({"prompt": "x", "max_tokens": 2, "ignore_eos": true})",
                                "", "HTTP/1.0")));
  bool closed = false;
  std::string raw = read_to_close(fd, &closed);
  ::close(fd);
  EXPECT_TRUE(closed);
  auto r = take_response(raw, true);
  ASSERT_TRUE(r) << raw;
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(r->has_length);
  EXPECT_FALSE(r->chunked);
  EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"], 2);

  // Streaming: no Transfer-Encoding (HTTP/1.0 has none); the SSE events are the raw body up to the close.
  for (const std::string path : {"/v1/completions", "/v1/chat/completions"}) {
    const std::string body =
        path == "/v1/completions"
            ? R"({"prompt": "x", "max_tokens": 4, "stream": true, "ignore_eos": true})"
            : R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": true, "ignore_eos": true})";
    const int s = connect_to(srv_->port());
    ASSERT_GE(s, 0);
    ASSERT_TRUE(send_all(s, post_request(path, body, "", "HTTP/1.0")));
    bool eof = false;
    std::string stream = read_to_close(s, &eof);
    ::close(s);
    EXPECT_TRUE(eof);
    const auto head_end = stream.find("\r\n\r\n");
    ASSERT_NE(head_end, std::string::npos) << stream;
    const std::string head = lower(stream.substr(0, head_end + 2));
    EXPECT_EQ(head.find("transfer-encoding"), std::string::npos) << head;
    EXPECT_NE(head.find("content-type: text/event-stream"), std::string::npos) << head;
    const std::string events = stream.substr(head_end + 4);
    // Strictly SSE: every event is `data: <json>` or `data: [DONE]`, and [DONE] is last.
    size_t pos = 0, n_json = 0;
    bool done = false;
    while (pos < events.size()) {
      const size_t end = events.find("\n\n", pos);
      ASSERT_NE(end, std::string::npos) << "a cut event: " << events.substr(pos);
      const std::string ev = events.substr(pos, end - pos);
      pos = end + 2;
      if (ev.rfind(":", 0) == 0) continue;  // keep-alive comment
      ASSERT_EQ(ev.rfind("data: ", 0), 0u) << ev;
      ASSERT_FALSE(done) << "an event after [DONE]";
      if (ev == "data: [DONE]") {
        done = true;
        continue;
      }
      const json j = json::parse(ev.substr(6), nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << ev;
      ++n_json;
    }
    EXPECT_TRUE(done) << events;
    EXPECT_GE(n_json, 2u);
  }
}

}  // namespace
}  // namespace moxi::serve
