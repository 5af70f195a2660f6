#pragma once
// Small pieces every ZeroMQ user here needs: an eventfd to wake a poller, zmq_poll that rides
// out signals, socket monitor events, and routing ids made printable for logs.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace supernode::transport::detail {

// Non-blocking, close-on-exec; throws std::system_error.
int open_eventfd();
// Wakes a poller watching `fd` (a counter already non-zero wakes it anyway).
void signal_eventfd(int fd);
void clear_eventfd(int fd);

// zmq::poll, retried when a signal delivered to the process (SIGCHLD in tests) interrupts it.
void poll_retrying(std::vector<zmq::pollitem_t>& items,
                   std::chrono::milliseconds timeout = std::chrono::milliseconds{-1});

// One event of a zmq socket monitor: the 6-byte id/value frame, then the address frame.
struct monitor_event {
  uint16_t id = 0;
  uint32_t value = 0;
  std::string address;
};
// The next event waiting on a monitor socket (non-blocking); false when none is.
bool read_monitor_event(zmq::socket_t& monitor, monitor_event& event);

// A tcp endpoint to bind: zmq binds to an interface name or an address, not to a host name, so
// "tcp://decode-1:7000" (a container's own name, cluster_config's "{process}" host) becomes
// "tcp://<its IPv4 address>:7000". Anything else is returned as it is.
std::string bindable_endpoint(const std::string& endpoint);

// Routing ids come off the wire: a raw socket may send any bytes as its id.
std::string printable(const std::string& s);

} // namespace supernode::transport::detail
