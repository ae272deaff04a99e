// connection: /proc/self/fd lists the descriptors; getpeername/getsockname pick the one of the request, and
// poll(POLLRDHUP) with a MSG_PEEK read tells a closed peer from one that is merely quiet.
#include "moxi/serve/connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <charconv>
#include <filesystem>

namespace moxi::serve {
namespace {

// Numeric host and port of a socket address; false for non-IP families.
bool host_port(const sockaddr_storage& a, socklen_t len, std::string& host, int& port) {
  if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(p);
  return true;
}

}  // namespace

int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string name = entry.path().filename().string();
    int fd = -1;
    if (std::from_chars(name.data(), name.data() + name.size(), fd).ec != std::errc()) continue;
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof peer, local_len = sizeof local;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) continue;
    std::string peer_host, local_host;
    int peer_port = 0, port = 0;
    if (!host_port(peer, peer_len, peer_host, peer_port) || !host_port(local, local_len, local_host, port))
      continue;
    if (peer_port == remote_port && port == local_port && peer_host == remote_addr) return fd;
  }
  return -1;
}

bool peer_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
  }
  return false;
}

}  // namespace moxi::serve
