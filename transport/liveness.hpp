#pragma once
// The failure detector's two settings and the bound they make, defined once: the cluster file
// sets them ([cluster] heartbeat_ms, missed_heartbeats) and membership applies them.

#include <chrono>

namespace supernode::transport {

struct liveness_options {
  std::chrono::milliseconds heartbeat_interval{100};
  int missed_heartbeats = 5;
  // How long a member may stay silent before its peers declare it down (and fence it).
  std::chrono::milliseconds bound() const { return heartbeat_interval * missed_heartbeats; }
};

} // namespace supernode::transport
