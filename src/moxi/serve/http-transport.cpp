// http-transport: Boost.Beast's request parser (header_limit and body_limit, the latter applied to the sum of
// chunk sizes too; differing Content-Length values are a parse error) over Boost.Asio. Every connection is
// a session on its own strand; responses are written as raw bytes so that HTTP/1.0 streams and chunked
// HTTP/1.1 streams are exactly what the client can read.
#include "moxi/serve/http-transport.h"

#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "moxi/base/error.h"

namespace moxi::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string http_request::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (beast::iequals(k, beast::string_view(name.data(), name.size()))) return v;
  return "";
}

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

std::string reason(int status) {
  if (status == 499) return "Client Closed Request";  // nginx's code for a client that went away
  const auto r = http::obsolete_reason(http::int_to_status(unsigned(status)));
  return r == "<unknown-status>" ? "Unknown" : std::string(r);
}

using header_list = std::vector<std::pair<std::string, std::string>>;

std::string status_head(int status, std::string_view content_type, const header_list& extra) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\nServer: moxi\r\n";
  if (!content_type.empty()) h += "Content-Type: " + std::string(content_type) + "\r\n";
  for (const auto& [k, v] : extra) h += k + ": " + v + "\r\n";
  return h;
}

}  // namespace

class session;

struct http_server::impl {
  http_limits lim;
  http_handler handler;
  http_observer obs;
  std::atomic<bool> closing{false};

  mutable std::mutex m;
  std::map<uint64_t, std::weak_ptr<session>> sessions;
  uint64_t next_session = 0;
  std::vector<std::thread> threads;
  bool started = false, stopped = false;

  // Declared last, destroyed first: the handlers it still holds (sessions) unregister from `sessions`.
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};

  impl(http_limits l, http_handler h, http_observer o)
      : lim(l), handler(std::move(h)), obs(std::move(o)), ioc(std::max(1, l.io_threads)) {}

  std::string error_body(int status, const std::string& msg) const {
    return obs.error_body ? obs.error_body(status, msg) : msg;
  }
  void do_accept();
};

// One connection: reads requests one after another (pipelined bytes wait in the buffer), hands each to the
// handler and continues after its response.
class session : public std::enable_shared_from_this<session> {
 public:
  session(tcp::socket s, http_server::impl& srv) : stream_(std::move(s)), srv_(srv) {}
  ~session() {
    std::lock_guard<std::mutex> l(srv_.m);
    srv_.sessions.erase(id_);
  }
  void set_id(uint64_t id) { id_ = id; }

  void run() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(true); });
  }
  // A connection over the cap: 503 and close, nothing read.
  void reject() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->fail(503, "the server has too many open connections; retry later", false);
    });
  }
  void close() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->close_now(); });
  }

  // Posts `bytes` for writing; `done(ok)` runs on the strand once written, failed or timed out.
  void write(std::shared_ptr<std::string> bytes, std::function<void(bool)> done) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), bytes, done = std::move(done)] {
      if (self->closed_) return done(false);
      self->stream_.expires_after(seconds(self->srv_.lim.write_timeout_s));
      asio::async_write(self->stream_, asio::buffer(*bytes),
                        [self, bytes, done](beast::error_code ec, size_t) {
                          self->stream_.expires_never();
                          if (ec) self->close_now();
                          done(!ec);
                        });
    });
  }
  bool write_blocking(std::string bytes) {
    auto p = std::make_shared<std::promise<bool>>();
    auto f = p->get_future();
    write(std::make_shared<std::string>(std::move(bytes)), [p = std::move(p)](bool ok) { p->set_value(ok); });
    try {
      return f.get();
    } catch (const std::future_error&) {  // the event loop was stopped before the write ran
      return false;
    }
  }
  // After a response: the next request on this connection, or close.
  void finish(bool keep) {
    asio::post(stream_.get_executor(), [self = shared_from_this(), keep] {
      if (self->closed_) return;
      if (keep && self->keep_alive_ && !self->srv_.closing.load())
        self->read_header(false);
      else
        self->graceful_close();
    });
  }
  bool peer_closed() {
    std::lock_guard<std::mutex> l(fd_m_);
    if (closed_) return true;
    const int fd = stream_.socket().native_handle();
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    if (::poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (p.revents & POLLIN) {
      char c;
      return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }
    return false;
  }
  bool keep_alive() const { return keep_alive_; }
  int version() const { return version_; }
  http_server::impl& server() { return srv_; }

 private:
  void read_header(bool first) {
    parser_.emplace();
    parser_->header_limit(uint32_t(std::min<size_t>(srv_.lim.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(srv_.lim.max_body_bytes);
    // A new connection gets the header timeout; a kept-alive one waits for its next request (or the rest of a
    // pipelined one) no longer than the idle timeout. Either way it is one deadline for the whole header,
    // however slowly its bytes trickle in.
    stream_.expires_after(seconds(first ? srv_.lim.header_timeout_s : srv_.lim.idle_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    const auto& h = parser_->get();
    const size_t count = size_t(std::distance(h.begin(), h.end()));
    if (count > srv_.lim.max_header_count)
      return fail(431,
                  "the request has " + std::to_string(count) + " header fields; the limit is " +
                      std::to_string(srv_.lim.max_header_count),
                  true);
    if (beast::iequals(h[http::field::expect], "100-continue")) {
      auto bytes = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      stream_.expires_after(seconds(srv_.lim.write_timeout_s));
      asio::async_write(stream_, asio::buffer(*bytes),
                        [self = shared_from_this(), bytes](beast::error_code e, size_t) {
                          if (e) return self->close_now();
                          self->read_body();
                        });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(seconds(srv_.lim.body_timeout_s));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(beast::error_code ec) {
    if (ec) return on_read_error(ec);
    stream_.expires_never();
    auto& req = parser_->get();
    http_request r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    r.path = r.target.substr(0, r.target.find('?'));
    r.version = int(req.version());
    r.keep_alive = req.keep_alive();
    for (const auto& f : req) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    r.body = std::move(req.body());
    parser_.reset();
    keep_alive_ = r.keep_alive && !srv_.closing.load();
    version_ = r.version;
    dispatch(std::move(r));
  }

  void dispatch(http_request r);

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::header_limit)
      return fail(431, "the request header exceeds " + std::to_string(srv_.lim.max_header_bytes) + " bytes",
                  true);
    if (ec == http::error::body_limit)
      return fail(413, "the request body exceeds " + std::to_string(srv_.lim.max_body_bytes) + " bytes",
                  true);
    // A deadline passed (beast::error::timeout): the stream has closed the socket already; nothing more is
    // said to a client that did not finish its request in time.
    if (ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message)
      return fail(400, "malformed HTTP request: " + ec.message(), true);
    close_now();  // end of stream between requests, a reset, a half-sent request
  }

 public:
  // An error response, then close (the rest of the request is not read).
  void fail(int status, const std::string& msg, bool count) {
    if (closed_) return;
    if (count && srv_.obs.on_error) srv_.obs.on_error(status);
    parser_.reset();
    keep_alive_ = false;
    const std::string body = srv_.error_body(status, msg);
    auto bytes = std::make_shared<std::string>(
        status_head(status, "application/json",
                    {{"Content-Length", std::to_string(body.size())}, {"Connection", "close"}}) +
        "\r\n" + body);
    stream_.expires_after(seconds(srv_.lim.write_timeout_s));
    asio::async_write(
        stream_, asio::buffer(*bytes),
        [self = shared_from_this(), bytes](beast::error_code, size_t) { self->graceful_close(); });
  }

  // Shuts down the sending side, then reads and drops what the client still sends for a moment (at most a
  // second and 4 MiB), so that a response sent before its request was read whole is not lost to a reset
  // (a client that writes its whole body before reading, as most do, then still gets its 413).
  void graceful_close() {
    if (closed_) return;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(1));
    discard();
  }

  void close_now() {
    std::lock_guard<std::mutex> l(fd_m_);
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

 private:
  void discard() {
    stream_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->discarded_ += n;
                              if (ec || self->discarded_ > (4u << 20)) return self->close_now();
                              self->discard();
                            });
  }

  beast::tcp_stream stream_;
  http_server::impl& srv_;
  uint64_t id_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::mutex fd_m_;  // close vs peer_closed() from a handler thread
  std::atomic<bool> closed_{false};
  bool keep_alive_ = true;
  int version_ = 11;
  std::array<char, 16384> scratch_{};
  size_t discarded_ = 0;
};

namespace {

class exchange final : public http_exchange {
 public:
  explicit exchange(std::shared_ptr<session> s, http_request info)
      : s_(std::move(s)), info_(std::move(info)) {}
  ~exchange() override {
    if (!responded_) {
      reply(500, "application/json", s_->server().error_body(500, "the request was not answered"), {});
    } else if (streaming_ && !ended_) {
      s_->finish(false);
    }
  }

  void reply(int status, std::string_view content_type, std::string body, header_list extra) override {
    if (responded_) return;
    responded_ = true;
    log(status);
    extra.emplace_back("Content-Length", std::to_string(body.size()));
    if (!s_->keep_alive())
      extra.emplace_back("Connection", "close");
    else if (s_->version() == 10)
      extra.emplace_back("Connection", "keep-alive");
    auto bytes = std::make_shared<std::string>(status_head(status, content_type, extra) + "\r\n");
    if (info_.method != "HEAD") *bytes += body;
    auto s = s_;
    s_->write(bytes, [s](bool ok) { s->finish(ok); });
  }

  bool start_stream(int status, std::string_view content_type, header_list extra) override {
    if (responded_) return false;
    responded_ = streaming_ = true;
    log(status);
    chunked_ = s_->version() >= 11;
    if (chunked_)
      extra.emplace_back("Transfer-Encoding", "chunked");
    else
      extra.emplace_back("Connection", "close");  // HTTP/1.0: the body ends where the connection does
    if (chunked_ && !s_->keep_alive()) extra.emplace_back("Connection", "close");
    ok_ = s_->write_blocking(status_head(status, content_type, extra) + "\r\n");
    return ok_;
  }

  bool write(std::string_view data) override {
    if (!ok_ || ended_) return false;
    if (data.empty()) return true;  // an empty chunk would end a chunked body
    if (!chunked_) return ok_ = s_->write_blocking(std::string(data));
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return ok_ = s_->write_blocking(size + std::string(data) + "\r\n");
  }

  void end_stream() override {
    if (ended_ || !streaming_) return;
    ended_ = true;
    if (ok_ && chunked_) ok_ = s_->write_blocking("0\r\n\r\n");
    s_->finish(ok_ && chunked_);
  }

  bool client_gone() override { return s_->peer_closed(); }

 private:
  void log(int status) {
    auto& obs = s_->server().obs;
    if (obs.on_response) obs.on_response(info_, status);
  }
  std::shared_ptr<session> s_;
  http_request info_;  // method and path, for the access log
  bool responded_ = false, streaming_ = false, chunked_ = false, ended_ = false, ok_ = true;
};

}  // namespace

void session::dispatch(http_request r) {
  http_request info;
  info.method = r.method;
  info.path = r.path;
  info.target = r.target;
  info.version = r.version;
  auto ex = std::make_shared<exchange>(shared_from_this(), std::move(info));
  try {
    srv_.handler(std::move(r), ex);
  } catch (const std::exception& e) {
    ex->reply(500, "application/json", srv_.error_body(500, std::string("internal error: ") + e.what()), {});
  }
}

void http_server::impl::do_accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket sock) {
    if (!acceptor.is_open() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors (EMFILE) or a connection reset before accept: try again shortly, not in a loop.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e) do_accept();
      });
      return;
    }
    beast::error_code ignored;
    // SSE chunks are small writes: with Nagle's algorithm each would wait for the ACK of the one before.
    sock.set_option(tcp::no_delay(true), ignored);
    auto s = std::make_shared<session>(std::move(sock), *this);
    bool over = false;
    {
      std::lock_guard<std::mutex> l(m);
      over = sessions.size() >= lim.max_connections;
      s->set_id(++next_session);
      sessions[next_session] = s;
    }
    if (over || closing.load()) {
      if (obs.on_error) obs.on_error(503);
      s->reject();
    } else {
      s->run();
    }
    do_accept();
  });
}

http_server::http_server(http_limits limits, http_handler handler, http_observer observer)
    : impl_(std::make_shared<impl>(limits, std::move(handler), std::move(observer))) {}

http_server::~http_server() {
  stop();
}

int http_server::start(const std::string& host, int port) {
  auto& p = *impl_;
  MOXI_ASSERT(!p.started, "http server started twice");
  beast::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) throw error("serve: '" + host + "' is not an IP address");
  const tcp::endpoint ep(addr, uint16_t(port));
  p.acceptor.open(ep.protocol(), ec);
  if (!ec) p.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) p.acceptor.bind(ep, ec);
  if (!ec) p.acceptor.listen(4096, ec);
  if (ec) throw error("serve: cannot bind " + host + ":" + std::to_string(port) + ": " + ec.message());
  p.started = true;
  p.do_accept();
  for (int i = 0; i < std::max(1, p.lim.io_threads); ++i) p.threads.emplace_back([&p] { p.ioc.run(); });
  return p.acceptor.local_endpoint().port();
}

void http_server::close_connections() {
  auto& p = *impl_;
  p.closing = true;
  std::vector<std::shared_ptr<session>> live;
  {
    std::lock_guard<std::mutex> l(p.m);
    for (auto& [id, w] : p.sessions)
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) s->close();
}

void http_server::stop() {
  auto& p = *impl_;
  {
    std::lock_guard<std::mutex> l(p.m);
    if (!p.started || p.stopped) return;
    p.stopped = true;
  }
  asio::post(p.ioc, [&p] {
    beast::error_code ec;
    p.acceptor.close(ec);
    p.accept_retry.cancel();
  });
  close_connections();
  // What the loop still has to do (closing sockets) gets a moment; then it stops, whatever is pending.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  while (connections() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  p.ioc.stop();
  for (auto& t : p.threads)
    if (t.joinable()) t.join();
}

size_t http_server::connections() const {
  std::lock_guard<std::mutex> l(impl_->m);
  return impl_->sessions.size();
}

}  // namespace moxi::serve
