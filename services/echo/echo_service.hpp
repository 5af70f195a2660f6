#pragma once
// The echo role: answers every ping with a pong carrying the same payload, and reassembles bulk
// transfers, acknowledging each complete one with its byte count and FNV-1a checksum. It is the
// peer the plane tests and benchmarks talk to.

#include "services/echo/echo_interface.hpp"
#include "services/role_logic.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace supernode::services {

class echo_service : public role_logic {
public:
  using interface = echo_interface;
  void on(const transport::peer_id& from, const transport::ping& m, transport::endpoint& out);
  void on(const transport::peer_id& from, const transport::bulk_chunk& m, transport::endpoint& out);
  size_t transfers_in_progress() const { return transfers_.size(); }

private:
  struct transfer {
    std::vector<char> bytes;
    uint64_t received = 0;
  };
  std::map<std::pair<transport::peer_id, uint64_t>, transfer> transfers_;
};

} // namespace supernode::services
