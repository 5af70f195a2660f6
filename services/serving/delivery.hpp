#pragma once
// Sending for serving roles. send_with_backoff waits out a full queue (back-pressure, not a
// reason to lose a token or a KV block) by retrying with a growing pause until the deadline; any
// other failure (peer down, unknown) is final and returned. It blocks its caller, so only compute
// and storage threads use it (their wait is the back-pressure); actor threads call
// endpoint::send_retrying, which queues instead.

#include "services/protocol/serving_messages.hpp"
#include "transport/endpoint.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace supernode::services {

transport::send_status
send_with_backoff(transport::endpoint& ep, const std::string& flow, const transport::peer_id& to,
                  const transport::envelope& message,
                  std::chrono::milliseconds deadline = std::chrono::milliseconds(5000));

// Instances of `role` in the cluster, in config order.
std::vector<std::string> instances_with_role(const transport::cluster_config& cluster,
                                             const std::string& role);

// Sends `report`, with this instance's plane traffic filled in, to every scheduler.
void send_load_report(transport::endpoint& out, protocol::load_report report);

// Byte and message counts of every plane of the endpoint, for load reports and /metrics.
std::vector<protocol::plane_traffic> plane_traffic_of(const transport::endpoint& ep);

} // namespace supernode::services
