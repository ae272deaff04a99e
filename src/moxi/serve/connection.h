// connection: whether the client of a request that is still being computed has gone away. cpp-httplib 0.11
// (Debian 12) hands handlers no socket (later versions have Request::is_connection_closed), so the accepted
// socket is found by its addresses; while the handler runs it owns the connection, so the descriptor cannot
// change under it. Used to cancel non-streaming requests whose client closed the connection (a streaming
// one notices at its next write).
#pragma once

#include <string>

namespace moxi::serve {

// The descriptor of this process's TCP socket connected from remote_addr:remote_port (numeric host, as
// cpp-httplib fills Request::remote_addr) to local_port; -1 when there is none.
int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port);

// True when the peer has closed (or reset) the connection: an orderly shutdown of its sending side is end of
// stream, seen without consuming any byte it sent before (a pipelined request stays readable).
bool peer_closed(int fd);

}  // namespace moxi::serve
