#pragma once
// A base port for a ZeroMQ tcp plane on this host (it takes 3 ports per instance from the base):
// `count` consecutive ports that are free on 127.0.0.1 now. Free now only — another program may
// take one before the cluster binds it — so callers draw at random from a wide range, which makes
// two callers (parallel tests, a benchmark beside them) unlikely to pick the same range. The range
// ends below Linux's default ephemeral ports (32768 up): a DEALER retrying a peer that has not
// bound yet takes a new ephemeral port for every attempt, and one of them must not be a port the
// cluster is about to bind ("Address already in use", or a tcp self-connect).
// Header-only, so test helpers that link no library can use it.

#include <arpa/inet.h>
#include <cstdint>
#include <netinet/in.h>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <unistd.h>

namespace supernode::transport {

inline bool tcp_port_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// Throws std::runtime_error when 200 random draws found no free range.
inline int free_tcp_port_range(int count, uint64_t salt) {
  uint64_t x = static_cast<uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull + salt * 7919 + 1;
  for (int attempt = 0; attempt < 200; ++attempt) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int base = 20000 + static_cast<int>((x >> 33) % static_cast<uint64_t>(12768 - count));
    bool ok = true;
    for (int p = base; p < base + count && ok; ++p) ok = tcp_port_free(p);
    if (ok) return base;
  }
  throw std::runtime_error("found no " + std::to_string(count) +
                           " consecutive free tcp ports on 127.0.0.1 for a ZeroMQ tcp plane");
}

} // namespace supernode::transport
