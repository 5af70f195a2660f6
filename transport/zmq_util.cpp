#include "transport/zmq_util.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <netdb.h>
#include <sys/eventfd.h>
#include <system_error>
#include <unistd.h>

namespace supernode::transport::detail {

int open_eventfd() {
  int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  return fd;
}

void signal_eventfd(int fd) {
  const uint64_t one = 1;
  // EAGAIN means the counter is already non-zero, so the poller is woken anyway.
  [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
}

void clear_eventfd(int fd) {
  uint64_t count;
  [[maybe_unused]] auto n = ::read(fd, &count, sizeof count);
}

void poll_retrying(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds timeout) {
  for (;;) {
    try {
      zmq::poll(items, timeout);
      return;
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
  }
}

bool read_monitor_event(zmq::socket_t& monitor, monitor_event& event) {
  for (;;) {
    zmq::message_t head, where;
    if (!monitor.recv(head, zmq::recv_flags::dontwait)) return false;
    if (!head.more() || !monitor.recv(where, zmq::recv_flags::none) || head.size() < 6) continue;
    std::memcpy(&event.id, head.data(), sizeof event.id);
    std::memcpy(&event.value, static_cast<const char*>(head.data()) + 2, sizeof event.value);
    event.address = where.to_string();
    return true;
  }
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

std::string bindable_endpoint(const std::string& endpoint) {
  if (!endpoint.starts_with("tcp://")) return endpoint;
  const auto colon = endpoint.rfind(':');
  const std::string host = endpoint.substr(6, colon - 6);
  in_addr numeric{};
  if (host.empty() || host == "*" || host.find(':') != std::string::npos ||
      ::inet_pton(AF_INET, host.c_str(), &numeric) == 1)
    return endpoint;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || !found)
    return endpoint; // an interface name, or nothing: zmq says which
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr, text,
              sizeof text);
  ::freeaddrinfo(found);
  return "tcp://" + std::string(text) + endpoint.substr(colon);
}

} // namespace supernode::transport::detail
