// Finding and polling a request's socket (see server/connection.h).
#include "server/connection.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>

namespace llm::server {

namespace {

bool same_address(const sockaddr_storage& a, socklen_t len, const std::string& addr, int port) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  return addr == host && port == std::atoi(serv);
}

}  // namespace

int find_connection_socket(const std::string& local_addr, int local_port, const std::string& remote_addr,
                           int remote_port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || fd < 0 || fd == dirfd(dir)) continue;
    struct stat st;
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t peer_len = sizeof peer, self_len = sizeof self;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) continue;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&self), &self_len) != 0) continue;
    if (same_address(peer, peer_len, remote_addr, remote_port) && same_address(self, self_len, local_addr, local_port)) {
      found = int(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peer_connected(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) < 0) return true;  // cannot tell: the write path still notices
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) == 0;
}

}  // namespace llm::server
