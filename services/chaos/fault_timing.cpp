#include "services/chaos/fault_timing.hpp"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

namespace supernode::services::chaos {

namespace {

std::optional<double> first_event(const std::vector<process_event>& events, const std::string& slot,
                                  const std::string& kind, double after_s) {
  for (const auto& e : events)
    if (e.process == slot && e.event == kind && e.t_s >= after_s) return e.t_s;
  return std::nullopt;
}

bool hosts(const resolved_target& t, const std::string& instance) {
  return std::find(t.instances.begin(), t.instances.end(), instance) != t.instances.end();
}

// The first sample at or after `after_s` showing one of the target's instances down.
std::optional<double> first_down(const std::vector<liveness_sample>& samples,
                                 const resolved_target& t, double after_s) {
  for (const auto& s : samples)
    if (s.t_s >= after_s && !s.alive && hosts(t, s.instance)) return s.t_s;
  return std::nullopt;
}

// The first moment after `after_s` at which every instance of the target is alive again, from
// transitions in time order.
std::optional<double> all_up_again(const std::vector<liveness_sample>& samples,
                                   const resolved_target& t, double after_s) {
  std::map<std::string, bool> alive;
  for (const auto& s : samples) {
    if (!hosts(t, s.instance)) continue;
    alive[s.instance] = s.alive;
    if (s.t_s < after_s || !s.alive) continue;
    const bool all = std::all_of(t.instances.begin(), t.instances.end(), [&](const auto& name) {
      auto it = alive.find(name);
      return it == alive.end() || it->second; // never seen down is up
    });
    if (all) return s.t_s;
  }
  return std::nullopt;
}

std::optional<double> earliest(std::optional<double> a, std::optional<double> b) {
  if (a && b) return std::min(*a, *b);
  return a ? a : b;
}

} // namespace

std::vector<process_event> parse_process_events(std::string_view jsonl, double origin_unix) {
  std::vector<process_event> out;
  size_t start = 0;
  while (start < jsonl.size()) {
    size_t end = jsonl.find('\n', start);
    if (end == std::string_view::npos) end = jsonl.size();
    const auto j = nlohmann::json::parse(jsonl.substr(start, end - start), nullptr, false);
    start = end + 1;
    if (!j.is_object() || !j.contains("t") || !j["t"].is_number() || !j.contains("event") ||
        !j["event"].is_string() || !j.contains("process") || !j["process"].is_string())
      continue;
    out.push_back({j["t"].get<double>() - origin_unix, j["event"].get<std::string>(),
                   j["process"].get<std::string>()});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.t_s < b.t_s; });
  return out;
}

fault_record time_fault(const fired_fault& fault, const std::vector<process_event>& events,
                        const std::vector<liveness_sample>& samples) {
  fault_record r;
  r.kind = to_string(fault.spec.kind);
  r.target = fault.target ? fault.target->named : "*";
  r.at_s = fault.spec.at_s;
  r.duration_s = fault.spec.duration_s;
  r.note = fault.note;
  if (!fault.fired || !fault.note.empty() || !fault.target || !is_process_fault(fault.spec.kind))
    return r;
  const auto& t = *fault.target;
  r.detected_s = earliest(first_event(events, t.slot, "exited", fault.fired_s),
                          first_down(samples, t, fault.fired_s));
  if (!r.detected_s) return r;
  const auto ready = first_event(events, t.slot, "ready", *r.detected_s);
  r.recovered_s = ready ? ready : all_up_again(samples, t, *r.detected_s);
  return r;
}

} // namespace supernode::services::chaos
