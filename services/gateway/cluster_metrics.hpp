#pragma once
// /metrics for the whole cluster, rendered from a snapshot: what the scheduler last reported of
// every instance, and the gateway's own figures. Reads only its argument, so the gateway takes
// the snapshot under its lock and renders outside it.

#include "services/gateway/health.hpp"
#include "services/gateway/metrics.hpp"
#include "services/protocol/serving_messages.hpp"

#include <map>
#include <string>
#include <vector>

namespace supernode::services::gateway {

struct cluster_snapshot {
  protocol::cluster_stats stats; // the scheduler's latest
  std::string gateway;           // this gateway's instance name
  size_t gateway_requests_in_flight = 0;
  std::vector<protocol::plane_traffic> gateway_planes;
  std::map<std::string, uint64_t> gateway_unexpected;
  std::map<std::string, uint64_t> gateway_rejected;
  // Every non-gateway instance as this gateway's membership sees it (the MP controller and
  // anything else that sends no load report included).
  std::vector<member_health> members;
};

void render_cluster_metrics(metrics_registry& metrics, const cluster_snapshot& snapshot);

} // namespace supernode::services::gateway
