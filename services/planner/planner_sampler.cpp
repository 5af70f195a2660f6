#include "services/planner/planner_sampler.hpp"

#include "services/cluster/join_policy.hpp"
#include "services/cluster/scale_plan.hpp"

#include <algorithm>

namespace supernode::services::planner {

namespace {

// The kind hosting `role` (the topology lets only one: instance names are per role), or why it
// cannot be planned.
std::optional<kinds_problem> kind_of_role(const transport::cluster_config& cluster,
                                          const std::string& role, const std::string& other,
                                          int32_t max_count, std::string& kind) {
  const std::string enabled = " with the planner on ([planner] enabled = true)";
  for (const auto& p : cluster.processes) {
    const bool hosts = std::find(p.roles.begin(), p.roles.end(), role) != p.roles.end();
    if (!hosts) continue;
    if (std::find(p.roles.begin(), p.roles.end(), other) != p.roles.end())
      return kinds_problem{{"process", p.name},
                           "roles",
                           "hosts both \"prefill\" and \"decode\"" + enabled +
                               ": a count of these processes is no count of either role"};
    if (p.per_process != 1)
      return kinds_problem{{"process", p.name},
                           "per_process",
                           "must be 1" + enabled + " (one " + role +
                               " instance per process), got " + std::to_string(p.per_process)};
    // Past the config's slots the supervisor starts processes that join; a kind whose
    // processes cannot join is held to its slots.
    if (const auto why = cluster::join_refusal(cluster, 1, 1, p.name);
        max_count > p.count && !why.empty())
      return kinds_problem{{"planner"},
                           "max_" + role,
                           "must be at most [process." + p.name + "] count (" +
                               std::to_string(p.count) + ") since " + why + "; got " +
                               std::to_string(max_count)};
    if (max_count > cluster::max_processes_per_kind)
      return kinds_problem{{"planner"},
                           "max_" + role,
                           "must be at most " + std::to_string(cluster::max_processes_per_kind) +
                               " (processes per kind a scale may ask for), got " +
                               std::to_string(max_count)};
    kind = p.name;
    break;
  }
  if (kind.empty())
    return kinds_problem{
        {"planner"}, "enabled", "needs a [process.<kind>] with \"" + role + "\" in its roles"};
  return std::nullopt;
}

} // namespace

kinds_or_problem planner_process_kinds(const transport::cluster_config& cluster,
                                       const planner_config& config) {
  kinds_or_problem out;
  out.problem = kind_of_role(cluster, "prefill", "decode", config.max_prefill, out.kinds.prefill);
  if (!out.problem)
    out.problem = kind_of_role(cluster, "decode", "prefill", config.max_decode, out.kinds.decode);
  if (!out.problem)
    out.kinds.switch_in_place =
        cluster::switch_refusal(cluster, 1, 1, out.kinds.prefill, "decode").empty() &&
        cluster::switch_refusal(cluster, 1, 1, out.kinds.decode, "prefill").empty();
  return out;
}

role_counts counts_of_kind(const nlohmann::json& status, const std::string& kind) {
  role_counts c;
  if (!status.is_object() || !status.contains("processes")) return c;
  for (const auto& p : status["processes"]) {
    // A slot counts for the kind it serves: a switched prefill process is a decode one.
    const auto serves =
        p.value("serves", cluster::process_kind_of(p.value("process", std::string())));
    if (serves != kind) continue;
    const std::string phase = p.value("phase", std::string());
    if (phase == "serving")
      ++c.serving;
    else if (phase == "starting" || p.value("state", std::string()) == "restarting")
      ++c.starting;
    else if (phase == "draining")
      ++c.draining;
  }
  return c;
}

planner_sample make_sample(std::chrono::steady_clock::time_point at, const nlohmann::json& status,
                           const planner_kinds& kinds, const measured_latencies& latencies,
                           const protocol::cluster_stats* stats, int64_t decode_batch_cap,
                           int64_t decode_max_batch) {
  planner_sample s;
  s.at = at;
  s.prefill = counts_of_kind(status, kinds.prefill);
  s.decode = counts_of_kind(status, kinds.decode);
  s.ttft_p90_ms = latencies.ttft_p90_ms;
  s.tpot_p90_ms = latencies.tpot_p90_ms;
  s.decode_batch_cap = decode_batch_cap;
  if (!stats) return s;
  s.queued = stats->queued;
  const int64_t seats =
      decode_batch_cap > 0 ? std::min(decode_batch_cap, decode_max_batch) : decode_max_batch;
  int64_t kv_used = 0, kv_total = 0;
  for (const auto& i : stats->instances) {
    if (!i.alive) continue;
    if (i.role == "prefill") s.prefill_outstanding_tokens += i.outstanding_prompt_tokens;
    if (i.role != "decode") continue;
    // An instance whose batch is full makes what is placed on it wait for a seat: queued as
    // much as what the scheduler holds. (Below its seats, its waiting requests are only
    // waiting for their KV: prefill's business, and no queue.)
    if (i.running >= seats) s.queued += i.waiting;
    s.decode_running += i.running;
    kv_used += i.kv_blocks_used;
    kv_total += i.kv_blocks_total;
  }
  s.decode_kv_usage = kv_total > 0 ? static_cast<double>(kv_used) / kv_total : 0.0;
  return s;
}

bool changes_counts(const planner_decision& d, const planner_sample& from) {
  return d.target_counts.at("prefill") != from.prefill.serving ||
         d.target_counts.at("decode") != from.decode.serving;
}

nlohmann::json scale_request_for(const planner_decision& d, const planner_kinds& kinds,
                                 const std::string& operation_id,
                                 std::chrono::milliseconds drain_timeout) {
  nlohmann::json request{{"request", "scale"},
                         {"counts",
                          {{kinds.prefill, d.target_counts.at("prefill")},
                           {kinds.decode, d.target_counts.at("decode")}}},
                         {"operation_id", operation_id},
                         {"drain_timeout_ms", drain_timeout.count()}};
  // A switch the planner decided is made in place where the processes can (same process, same
  // model copy); elsewhere as a count change.
  if (!d.switches.empty() && kinds.switch_in_place) request["switch"] = true;
  return request;
}

} // namespace supernode::services::planner
