#include "services/gateway/health.hpp"

#include <nlohmann/json.hpp>

namespace supernode::services::gateway {

std::string health_report::json() const {
  nlohmann::json j = {{"status", state}};
  if (!problems.empty()) j["problems"] = problems;
  return j.dump();
}

namespace {
bool serving(const member_health& m) {
  return m.alive && m.unavailable.ok();
}
} // namespace

health_report assess_health(const std::vector<member_health>& members) {
  health_report out;
  std::vector<std::string> fatal;
  bool any_scheduler = false, any_decode = false, has_prefill = false, any_prefill = false;
  for (const auto& m : members) {
    if (m.role == "scheduler") any_scheduler |= m.alive;
    if (m.role == "decode") any_decode |= serving(m);
    if (m.role == "prefill") {
      has_prefill = true;
      any_prefill |= serving(m);
    }
    if (!m.alive)
      out.problems.push_back(m.name + " (" + m.role + ") is down");
    else if (!m.unavailable.ok())
      out.problems.push_back(m.name + " (" + m.role +
                             ") takes no requests: " + m.unavailable.message);
  }
  if (!any_scheduler) fatal.push_back("no scheduler is alive");
  if (!any_decode) fatal.push_back("no decode instance is serving");
  if (has_prefill && !any_prefill) fatal.push_back("no prefill instance is serving");
  if (!fatal.empty()) {
    out.status = 503;
    out.state = "unavailable";
    fatal.insert(fatal.end(), out.problems.begin(), out.problems.end());
    out.problems = std::move(fatal);
  } else {
    out.state = out.problems.empty() ? "ok" : "degraded";
  }
  return out;
}

} // namespace supernode::services::gateway
