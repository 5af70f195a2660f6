#pragma once
// What /health answers, from the gateway's view of its cluster: 503 "unavailable" with the
// reason while no request can be served (no scheduler, no decode capacity, no prefill capacity
// in a disaggregated cluster), 200 "degraded" naming what is missing while some instance is
// down, restarting or its expert-parallel group is re-forming, 200 "ok" otherwise. Pure logic:
// the gateway passes liveness (its membership) and the scheduler's latest statistics.

#include "services/protocol/serving_messages.hpp"

#include <optional>
#include <string>
#include <vector>

namespace supernode::services::gateway {

struct member_health {
  std::string name, role;
  bool alive = false;
  protocol::error unavailable; // from the scheduler's statistics: why it takes no requests
};

struct health_report {
  unsigned status = 200;             // 200 or 503
  std::string state;                 // "ok", "degraded", "unavailable"
  std::vector<std::string> problems; // what is wrong, one line each
  std::string json() const;
};

// `members`: every instance of the cluster except gateways.
health_report assess_health(const std::vector<member_health>& members);

} // namespace supernode::services::gateway
