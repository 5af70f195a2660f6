#include "services/gateway/cluster_metrics.hpp"

#include <iterator>
#include <map>

namespace supernode::services::gateway {

namespace {

void render_stage_times(metrics_registry& metrics, const protocol::instance_stats& s) {
  static const char* stages[] = {"attention", "gate", "dispatch", "experts", "combine", "idle"};
  constexpr size_t n = std::size(stages);
  if (s.ep_stage_seconds.empty()) return;
  metrics.set_gauge("supernode_ep_forwards", "Forwards an expert-parallel rank took part in",
                    static_cast<double>(s.ep_forwards), {{"instance", s.name}});
  for (size_t i = 0; i + n <= s.ep_stage_seconds.size(); i += n)
    for (size_t st = 0; st < n; ++st)
      metrics.set_gauge(
          "supernode_ep_stage_seconds",
          "Seconds an expert-parallel rank spent per MoE layer and stage",
          s.ep_stage_seconds[i + st],
          {{"instance", s.name}, {"moe_layer", std::to_string(i / n)}, {"stage", stages[st]}});
}

void render_cache_stats(metrics_registry& metrics, const protocol::instance_stats& s) {
  const auto& c = s.cache;
  const labels l{{"instance", s.name}};
  auto gauge = [&](const char* name, const char* help, uint64_t v, const labels& with) {
    metrics.set_gauge(name, help, static_cast<double>(v), with);
  };
  if ((s.role == "prefill" || s.role == "decode") && (c.lookups > 0 || c.stored_blocks > 0)) {
    gauge("supernode_cache_lookups", "Prompts looked up in the context cache", c.lookups, l);
    gauge("supernode_cache_lookup_tokens", "Prompt tokens looked up in the context cache",
          c.lookup_tokens, l);
    gauge("supernode_cache_hit_tokens", "Prompt tokens whose KV was loaded from the pool",
          c.hit_tokens, l);
    gauge("supernode_cache_stored_blocks", "Context-cache blocks put into the pool",
          c.stored_blocks, l);
    gauge("supernode_cache_store_failures", "Context-cache puts the pool refused or lost",
          c.store_failures, l);
    gauge("supernode_cache_read_errors", "Context-cache lookups that failed (a miss)",
          c.read_errors, l);
    metrics.set_gauge("supernode_cache_load_seconds",
                      "Seconds spent looking up and loading cached KV from the pool",
                      c.load_seconds, l);
    gauge("supernode_cache_loaded_bytes", "KV bytes loaded from the pool", c.loaded_bytes, l);
  } else if (s.role == "mp_server") {
    for (const char* tier : {"dram", "ssd"}) {
      const bool dram = tier[0] == 'd';
      const labels t{{"instance", s.name}, {"tier", tier}};
      gauge("supernode_pool_blocks", "Blocks an MP server holds, per tier",
            dram ? c.dram_blocks : c.ssd_blocks, t);
      gauge("supernode_pool_bytes", "Bytes an MP server holds, per tier",
            dram ? c.dram_bytes : c.ssd_bytes, t);
      gauge("supernode_pool_hits", "Reads an MP server answered, per tier",
            dram ? c.dram_hits : c.ssd_hits, t);
      gauge("supernode_pool_evicted_blocks",
            "Blocks evicted: from DRAM to the SSD tier, or deleted from the SSD tier",
            dram ? c.evicted_dram : c.deleted_ssd, t);
    }
    gauge("supernode_pool_misses", "Reads of absent blocks", c.misses, l);
    gauge("supernode_pool_corrupt_blocks", "Blocks whose checksum failed (served as misses)",
          c.corrupt_blocks, l);
    gauge("supernode_pool_rejected_puts", "Puts refused (quota, size, write error)",
          c.rejected_puts, l);
    for (const char* direction : {"in", "out"})
      gauge("supernode_pool_handed_over_blocks",
            "Blocks a ring change moved to their new owner: received (in) or handed (out)",
            direction[0] == 'i' ? c.handed_over_in : c.handed_over_out,
            {{"instance", s.name}, {"direction", direction}});
    gauge("supernode_pool_handover_failed_blocks",
          "Blocks a ring change should have moved from this server that are lost to the cache",
          c.handover_failed, l);
  }
}

// The messages an instance refused: outside its role's interface (by type), and for their
// sender (by reason).
void render_refused(metrics_registry& metrics, const std::string& instance,
                    const std::map<std::string, uint64_t>& unexpected,
                    const std::map<std::string, uint64_t>& rejected) {
  for (auto& [type, n] : unexpected)
    metrics.set_gauge("supernode_unexpected_messages_total",
                      "Messages received outside the receiving role's interface, by type",
                      static_cast<double>(n), {{"instance", instance}, {"type", type}});
  for (auto& [reason, n] : rejected)
    metrics.set_gauge("supernode_rejected_messages_total",
                      "Messages refused because of who sent them, by reason",
                      static_cast<double>(n), {{"instance", instance}, {"reason", reason}});
}

} // namespace

void render_cluster_metrics(metrics_registry& metrics, const cluster_snapshot& snap) {
  const auto& stats = snap.stats;
  const auto live = snap.gateway_requests_in_flight;
  metrics.set_gauge("supernode_gateway_requests_in_flight", "Requests this gateway is serving",
                    static_cast<double>(live));
  metrics.set_gauge("supernode_scheduler_queued", "Requests admitted but not yet placed",
                    static_cast<double>(stats.queued));
  for (const auto& m : snap.members)
    metrics.set_gauge("supernode_member_alive",
                      "1 while the gateway hears the instance's heartbeats (every role)",
                      m.alive ? 1 : 0, {{"instance", m.name}, {"role", m.role}});
  // Instances per role and state, every state of every role present (0 included), so a
  // dashboard or the planner reads counts without knowing the instance names.
  std::map<std::string, std::map<std::string, int>> by_role;
  for (const auto& m : snap.members) {
    auto& states = by_role[m.role];
    for (const char* state : {"serving", "unavailable", "down"}) states.try_emplace(state, 0);
    ++states[!m.alive ? "down" : m.unavailable.ok() ? "serving" : "unavailable"];
  }
  for (const auto& [role, states] : by_role)
    for (const auto& [state, n] : states)
      metrics.set_gauge("supernode_instances",
                        "Instances of a role by state: serving, unavailable (alive, taking no "
                        "requests), down",
                        n, {{"role", role}, {"state", state}});
  for (auto& s : stats.instances) {
    const labels l{{"instance", s.name}, {"role", s.role}};
    metrics.set_gauge("supernode_instance_alive", "1 while the instance is a live member",
                      s.alive ? 1 : 0, l);
    metrics.set_gauge("supernode_instance_running", "Sequences in the instance's batch",
                      static_cast<double>(s.running), l);
    metrics.set_gauge("supernode_instance_waiting", "Requests queued at the instance",
                      static_cast<double>(s.waiting), l);
    if (s.role == "decode")
      for (auto [direction, n] :
           {std::pair{"in", s.sequences_moved_in}, std::pair{"out", s.sequences_moved_out}})
        metrics.set_gauge("supernode_sequences_moved",
                          "Sequences a decode instance took over with their KV from a draining "
                          "one (in), or handed on with theirs (out), since it started",
                          static_cast<double>(n), {{"instance", s.name}, {"direction", direction}});
    if (s.role == "decode" && (s.mtp_drafted > 0 || s.mtp_depth > 0)) {
      metrics.set_gauge("supernode_mtp_drafted_tokens",
                        "Tokens the MTP module drafted for verification, since start",
                        static_cast<double>(s.mtp_drafted), l);
      metrics.set_gauge("supernode_mtp_accepted_tokens",
                        "Drafted tokens the main model accepted, since start",
                        static_cast<double>(s.mtp_accepted), l);
      metrics.set_gauge("supernode_mtp_mean_accepted_length",
                        "Tokens a sequence emitted per step that drafted: 1 + accepted drafts",
                        s.mtp_drafting_steps > 0
                            ? 1.0 + static_cast<double>(s.mtp_accepted) /
                                        static_cast<double>(s.mtp_drafting_steps)
                            : 0.0,
                        l);
      metrics.set_gauge("supernode_mtp_depth",
                        "Drafts per sequence in the last step (adaptive: lowered to 0 when "
                        "verification costs more than it yields)",
                        static_cast<double>(s.mtp_depth), l);
    }
    metrics.set_gauge("supernode_instance_unavailable",
                      "1 when the instance takes no requests (its expert-parallel group broke)",
                      s.unavailable.ok() ? 0 : 1, l);
    render_stage_times(metrics, s);
    render_cache_stats(metrics, s);
    if (s.role == "decode") {
      metrics.set_gauge("supernode_kv_blocks_used", "KV blocks reserved or in use",
                        static_cast<double>(s.kv_blocks_used), l);
      metrics.set_gauge("supernode_kv_blocks_total", "KV blocks of the instance's pool",
                        static_cast<double>(s.kv_blocks_total), l);
    } else if (s.role == "prefill") {
      metrics.set_gauge("supernode_prefill_outstanding_tokens",
                        "Prompt tokens assigned and not yet prefilled",
                        static_cast<double>(s.outstanding_prompt_tokens), l);
    }
  }
  auto planes = stats.planes;
  for (auto& t : snap.gateway_planes) planes.emplace_back(snap.gateway, t);
  for (auto& [instance, t] : planes) {
    const labels l{{"instance", instance}, {"plane", t.plane}};
    metrics.set_gauge("supernode_plane_bytes_sent", "Bytes sent on a plane (running total)",
                      static_cast<double>(t.bytes_sent), l);
    metrics.set_gauge("supernode_plane_bytes_received", "Bytes received on a plane (running total)",
                      static_cast<double>(t.bytes_received), l);
    metrics.set_gauge("supernode_plane_bad_frames", "Malformed frames dropped (running total)",
                      static_cast<double>(t.bad_frames), l);
  }
  render_refused(metrics, snap.gateway, snap.gateway_unexpected, snap.gateway_rejected);
  render_refused(metrics, stats.scheduler, stats.scheduler_unexpected, stats.scheduler_rejected);
  for (auto& s : stats.instances)
    render_refused(metrics, s.name, s.unexpected_messages, s.rejected_messages);
}

} // namespace supernode::services::gateway
