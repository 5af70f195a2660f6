#pragma once
// The echo role: answers every ping with a pong carrying the same payload, and reassembles bulk
// transfers, acknowledging each complete one with its byte count and FNV-1a checksum. It is the
// peer the plane tests and benchmarks talk to. Reassembly (copies of up to 64 MiB and their
// checksum) runs on a thread of its own, never on the actor's.

#include "services/echo/echo_interface.hpp"
#include "services/role_logic.hpp"
#include "services/serving/serial_executor.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

namespace supernode::services {

class echo_service : public role_logic {
public:
  using interface = echo_interface;
  void on(const transport::peer_id& from, const transport::ping& m, transport::endpoint& out);
  void on(const transport::peer_id& from, std::shared_ptr<const transport::bulk_chunk> m,
          transport::endpoint& out);
  void stop() override { assembler_.stop(); }

private:
  // The assembler thread's.
  void assemble(const transport::peer_id& from, const transport::bulk_chunk& c,
                transport::endpoint& out);
  struct transfer {
    std::vector<char> bytes;
    uint64_t received = 0;
  };
  std::map<std::pair<transport::peer_id, uint64_t>, transfer> transfers_;
  serial_executor assembler_; // last: stops before the transfers it fills go
};

} // namespace supernode::services
