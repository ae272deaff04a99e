// http-transport: the HTTP/1.1 server under the OpenAI API (Boost.Beast's parser over a Boost.Asio event
// loop; docs/serving.md "HTTP transport", docs/security.md "Server"). A few event-loop threads own every
// connection: accept, read with header and body deadlines, parse with limits on header bytes, header count
// and body bytes (chunked bodies included), answer protocol errors (400, 408, 413, 431, 503) and write
// responses. Idle keep-alive connections cost a socket and a buffer, no thread, so thousands of them do
// not delay a request. Pipelined requests are answered in order on their connection; HTTP/1.0 clients get
// streams without chunked encoding, ended by closing the connection.
//
// A request reaches the handler on an event-loop thread, which must not block there: it answers at once
// (http_exchange::reply) or hands the exchange to a thread of its own, where the blocking calls (stream
// writes) are allowed. No Boost type appears in this header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moxi::serve {

struct http_limits {
  size_t max_body_bytes = 1 << 20;     // Content-Length or the sum of chunk sizes; 413 beyond
  size_t max_header_bytes = 64 << 10;  // request line + header fields; 431 beyond
  size_t max_header_count = 100;       // header fields; 431 beyond
  size_t max_connections = 4096;       // open connections; a new one beyond gets 503 and is closed
  double header_timeout_s = 10;        // from a request's first byte wait to its complete header
  double body_timeout_s = 30;          // to read a whole body
  double idle_timeout_s = 5;           // a keep-alive connection waiting for its next request
  double write_timeout_s = 30;         // one write to a client that does not read
  int io_threads = 2;                  // event-loop threads
};

struct http_request {
  std::string method;
  std::string path;    // the target without its query string
  std::string target;  // as sent
  int version = 11;    // 10 or 11
  bool keep_alive = true;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The first header named `name` (case-insensitive); "" when absent.
  std::string header(std::string_view name) const;
};

// One request's response. Any thread may call reply(); the stream calls block until their bytes are
// written (or the write failed or timed out) and must not be made on an event-loop thread. An exchange
// destroyed without a response answers 500.
class http_exchange {
 public:
  virtual ~http_exchange() = default;
  // A complete response with a Content-Length body.
  virtual void reply(int status, std::string_view content_type, std::string body,
                     std::vector<std::pair<std::string, std::string>> extra_headers = {}) = 0;
  // Starts a streamed response: chunked for HTTP/1.1, raw bytes until the connection closes for HTTP/1.0.
  // Returns false when the client is gone.
  virtual bool start_stream(int status, std::string_view content_type,
                            std::vector<std::pair<std::string, std::string>> extra_headers = {}) = 0;
  virtual bool write(std::string_view data) = 0;
  virtual void end_stream() = 0;
  // Whether the client closed or reset its connection (seen without consuming what it sent after this
  // request, so a pipelined request does not count).
  virtual bool client_gone() = 0;
};

using http_handler = std::function<void(http_request, std::shared_ptr<http_exchange>)>;

struct http_observer {
  std::function<void(int status)> on_error;  // a response with status >= 400 the transport itself made
  std::function<std::string(int status, const std::string& message)> error_body;  // JSON error bodies
  std::function<void(const http_request&, int status)> on_response;               // access log; may be empty
};

class http_server {
 public:
  http_server(http_limits limits, http_handler handler, http_observer observer);
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Binds host:port (0: an ephemeral port), starts the event-loop threads; returns the bound port. Throws
  // moxi::error when the address cannot be bound.
  int start(const std::string& host, int port);
  // Closes every connection at once (responses in progress fail their writes).
  void close_connections();
  // Stops accepting, closes every connection and joins the event-loop threads. Idempotent.
  void stop();
  // Open connections (for tests and /metrics).
  size_t connections() const;

  struct impl;

 private:
  std::shared_ptr<impl> impl_;
};

}  // namespace moxi::serve
