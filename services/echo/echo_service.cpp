#include "services/echo/echo_service.hpp"

#include "transport/checksum.hpp"
#include "transport/control_messages.hpp"

#include <cstring>

namespace supernode::services {

void echo_service::on(const transport::peer_id& from, const transport::ping& p,
                      transport::endpoint& out) {
  out.send("control", from, transport::make_envelope(transport::pong{p.seq, p.sent_ns, p.payload}));
}

void echo_service::on(const transport::peer_id& from,
                      std::shared_ptr<const transport::bulk_chunk> chunk,
                      transport::endpoint& out) {
  assembler_.post([this, from, chunk = std::move(chunk), &out] { assemble(from, *chunk, out); });
}

void echo_service::assemble(const transport::peer_id& from, const transport::bulk_chunk& c,
                            transport::endpoint& out) {
  using namespace transport;
  auto& t = transfers_[{from, c.transfer_id}];
  // The sender's total is bounded by what one transfer may be; a chunk outside it is dropped
  // rather than trusted.
  if (c.total_bytes > (uint64_t{1} << 32) || c.offset + c.data.size() > c.total_bytes) {
    transfers_.erase({from, c.transfer_id});
    return;
  }
  if (t.bytes.size() != c.total_bytes) t.bytes.resize(c.total_bytes);
  std::memcpy(t.bytes.data() + c.offset, c.data.data(), c.data.size());
  t.received += c.data.size();
  if (t.received >= c.total_bytes) {
    out.send("control", from,
             make_envelope(bulk_ack{c.transfer_id, t.received,
                                    transport::fnv1a(t.bytes.data(), t.bytes.size())}));
    transfers_.erase({from, c.transfer_id});
  }
}

} // namespace supernode::services
