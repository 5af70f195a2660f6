#pragma once
// The echo role: answers every ping with a pong carrying the same payload, and reassembles bulk
// transfers, acknowledging each complete one with its byte count and FNV-1a checksum. It is the
// peer the plane tests and benchmarks talk to.

#include "services/role_logic.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace supernode::services {

class echo_service : public role_logic {
public:
  void on_message(const transport::peer_id& from, const transport::envelope& message,
                  transport::endpoint& out) override;
  size_t transfers_in_progress() const { return transfers_.size(); }

private:
  struct transfer {
    std::vector<char> bytes;
    uint64_t received = 0;
  };
  std::map<std::pair<transport::peer_id, uint64_t>, transfer> transfers_;
};

} // namespace supernode::services
