// Whether the client of a request is still connected, for cancelling its generation when it goes away.
// cpp-httplib 0.11.4 (Debian 12) hands a handler neither the socket nor a "closed" flag, and a write to a socket
// whose peer has closed succeeds once before it fails; so the socket is found by its address pair (each TCP
// connection has its own: local address and port, remote address and port) among the process's open sockets, and
// polled: a peer that closed or reset its end shows POLLRDHUP, POLLHUP or POLLERR at once. The socket stays open
// while its request's handler runs, so the probe is valid for as long as the handler waits on the generation.
#pragma once
#include <functional>
#include <string>

namespace llm::server {

// The open socket connected from remote_addr:remote_port to local_addr:local_port (numeric addresses as
// getnameinfo writes them: "127.0.0.1", "::1"), or -1.
int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port);

// False once the peer of socket `fd` has closed or reset the connection (a poll that takes no time).
bool peer_connected(int fd);

}  // namespace llm::server
