#include "services/serving/delivery.hpp"

#include <thread>

namespace supernode::services {

transport::send_status send_with_backoff(transport::endpoint& ep, const std::string& flow,
                                         const transport::peer_id& to,
                                         const transport::envelope& message,
                                         std::chrono::milliseconds deadline) {
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + deadline;
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    const auto status = ep.send(flow, to, message);
    if (status != transport::send_status::queue_full || clock::now() >= until) return status;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

std::vector<std::string> instances_with_role(const transport::cluster_config& cluster,
                                             const std::string& role) {
  std::vector<std::string> out;
  for (auto& i : cluster.instances())
    if (i.role == role) out.push_back(i.name);
  return out;
}

void send_load_report(transport::endpoint& out, protocol::load_report report) {
  report.planes = plane_traffic_of(out);
  report.unexpected_messages = out.unexpected_messages();
  for (auto& [reason, n] : out.rejected_messages()) report.rejected_messages[reason] += n;
  auto message = transport::make_envelope(std::move(report));
  for (auto& s : instances_with_role(out.cluster(), "scheduler")) out.send("control", s, message);
}

std::vector<protocol::plane_traffic> plane_traffic_of(const transport::endpoint& ep) {
  std::vector<protocol::plane_traffic> out;
  for (auto& [name, pc] : ep.cluster().planes) {
    const transport::plane* p = ep.plane_named(name);
    if (!p) continue;
    const auto& c = p->counters();
    protocol::plane_traffic t;
    t.plane = name;
    t.bytes_sent = c.bytes_sent.load();
    t.bytes_received = c.bytes_received.load();
    t.messages_sent = c.messages_sent.load();
    t.messages_received = c.messages_received.load();
    t.bad_frames = c.bad_frames.total();
    out.push_back(t);
  }
  return out;
}

} // namespace supernode::services
