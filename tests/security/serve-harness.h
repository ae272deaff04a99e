// The security tests of the server (docs/security.md "Server") drive a real `moxi serve` child process on an
// ephemeral loopback port, through raw sockets for the protocol items, each exchange bounded by a receive
// timeout so that a regression fails instead of hanging.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/loopback.h"

extern char** environ;

namespace moxi::security_testing {

inline std::string bundled_model() {
  return std::string(MOXI_SOURCE_DIR) + "/models/moxi-tiny";
}

// `moxi serve --port 0 ARGS...` with its stderr captured; the port is read from its startup line.
class serve_process {
 public:
  explicit serve_process(std::vector<std::string> args, const std::string& model = bundled_model()) {
    std::vector<std::string> argv = {std::string(MOXI_BINARY_DIR) + "/moxi",
                                     "serve",
                                     "--model",
                                     model,
                                     "--host",
                                     "127.0.0.1",
                                     "--port",
                                     "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 2);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const int rc = posix_spawn(&pid_, cargv[0], &fa, nullptr, cargv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(pipefd[1]);
    if (rc != 0) {
      ::close(pipefd[0]);
      throw std::runtime_error("cannot start moxi serve");
    }
    reader_ = std::thread([this, fd = pipefd[0]] {
      char buf[4096];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof buf)) > 0) {
        std::lock_guard<std::mutex> l(m_);
        log_.append(buf, size_t(n));
      }
      ::close(fd);
    });
    // Startup (model load) is bounded; the line is "moxi serve: NAME on http://127.0.0.1:PORT ...".
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      {
        std::lock_guard<std::mutex> l(m_);
        const auto at = log_.find("http://127.0.0.1:");
        if (at != std::string::npos) port_ = std::atoi(log_.c_str() + at + 17);
      }
      if (port_ == 0 && exited()) break;
      if (port_ == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~serve_process() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    if (reader_.joinable()) reader_.join();
  }
  serve_process(const serve_process&) = delete;
  serve_process& operator=(const serve_process&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string log() const {
    std::lock_guard<std::mutex> l(m_);
    return log_;
  }
  bool exited() {
    if (status_) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
    return bool(status_);
  }
  // Waits up to `max_s` for the process to end; its wait status, or nullopt while it still runs.
  std::optional<int> wait_exit(double max_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(max_s);
    while (!exited() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return status_;
  }
  // Resident memory of the server in MiB (VmRSS).
  double rss_mib() const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::optional<int> status_;
  mutable std::mutex m_;
  std::string log_;
  std::thread reader_;
};

using moxi::testing::connect_to;  // common/loopback.h

inline bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    data.remove_prefix(size_t(n));
  }
  return true;
}

// Everything the peer sends until it closes (or the receive timeout, or `max` bytes).
inline std::string read_to_close(int fd, bool* closed = nullptr, size_t max = 64 << 20) {
  std::string out;
  char buf[16384];
  ssize_t n = 0;
  while (out.size() < max && (n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, size_t(n));
  if (closed) *closed = n == 0 || (n < 0 && errno == ECONNRESET);
  return out;
}

// Sends `block` again and again (up to `max_bytes`), collecting what the server answers meanwhile, until
// the server stops reading (a failed send) or closes; then reads the rest of its answer.
struct flood_result {
  size_t sent = 0;
  std::string reply;
  bool closed = false;
};
inline flood_result flood(int fd, const std::string& block, size_t max_bytes) {
  flood_result r;
  char buf[4096];
  while (r.sent < max_bytes) {
    if (!send_all(fd, block)) break;
    r.sent += block.size();
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) r.reply.append(buf, size_t(n));
    if (n == 0) break;
  }
  r.reply += read_to_close(fd, &r.closed);
  return r;
}

struct http_reply {
  int status = 0;
  std::string head;  // status line and header fields
  std::string body;  // de-chunked when the response was chunked
  bool chunked = false, has_length = false, close = false;
};

inline std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Parses one response from the front of `buf` (removing it); nullopt until a whole one is there. A body
// without length or chunking runs to the end of `buf` (`at_eof`: the connection has closed).
inline std::optional<http_reply> take_response(std::string& buf, bool at_eof) {
  const size_t end = buf.find("\r\n\r\n");
  if (end == std::string::npos) return std::nullopt;
  http_reply r;
  r.head = buf.substr(0, end + 2);
  if (r.head.rfind("HTTP/1.", 0) != 0 || r.head.size() < 12) return std::nullopt;
  r.status = std::atoi(r.head.c_str() + 9);
  const std::string h = lower(r.head);
  r.chunked = h.find("\r\ntransfer-encoding: chunked\r\n") != std::string::npos;
  r.close = h.find("\r\nconnection: close\r\n") != std::string::npos;
  size_t pos = end + 4;
  if (r.chunked) {
    for (;;) {
      const size_t le = buf.find("\r\n", pos);
      if (le == std::string::npos) return std::nullopt;
      const size_t n = std::stoul(buf.substr(pos, le - pos), nullptr, 16);
      if (buf.size() < le + 2 + n + 2) return std::nullopt;
      r.body += buf.substr(le + 2, n);
      pos = le + 2 + n + 2;
      if (n == 0) break;
    }
  } else if (const auto cl = h.find("\r\ncontent-length: "); cl != std::string::npos) {
    r.has_length = true;
    const size_t n = std::stoul(h.substr(cl + 18));
    if (buf.size() < pos + n) return std::nullopt;
    r.body = buf.substr(pos, n);
    pos += n;
  } else {
    if (!at_eof) return std::nullopt;
    r.body = buf.substr(pos);
    pos = buf.size();
  }
  buf.erase(0, pos);
  return r;
}

// Reads responses until `count` are complete or the connection closes / times out.
inline std::vector<http_reply> read_responses(int fd, size_t count, bool* closed = nullptr) {
  std::vector<http_reply> out;
  std::string buf;
  char tmp[16384];
  bool eof = false;
  while (out.size() < count) {
    while (auto r = take_response(buf, eof)) {
      out.push_back(std::move(*r));
      if (out.size() == count) break;
    }
    if (out.size() == count || eof) break;
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) {
      eof = true;
      if (closed) *closed = n == 0 || errno == ECONNRESET;
      continue;
    }
    buf.append(tmp, size_t(n));
  }
  return out;
}

inline std::string post_request(const std::string& path, const std::string& body,
                                const std::string& extra = "", const std::string& version = "HTTP/1.1") {
  return "POST " + path + " " + version + "\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         extra + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One request on a fresh connection; its response (status 0 when none came).
inline http_reply exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  http_reply r;
  if (send_all(fd, request)) {
    auto rs = read_responses(fd, 1);
    if (!rs.empty()) r = std::move(rs[0]);
  }
  ::close(fd);
  return r;
}

inline int health(int port) {
  return exchange(port, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").status;
}

}  // namespace moxi::security_testing
