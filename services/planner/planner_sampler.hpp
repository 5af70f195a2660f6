#pragma once
// What stands between the planner's pure rules (planner.hpp) and a running cluster, still as
// pure logic: which process kind hosts each of its two roles, a planner_sample made from the
// supervisor's `status` answer, the gateway's measured latencies and the scheduler's latest
// cluster_stats, and the supervisor's `scale` request that applies a decision. The thread that
// asks and sends is services/gateway/planner_runner.hpp.
//
//   status {"processes":[{"process":"decode-1","phase":"serving",...}]}  ─┐
//   p90 TTFT/TPOT of the last window, cluster_stats (queue, KV, running) ─┴▶ planner_sample
//   planner_decision ─▶ {"request":"scale","counts":{"prefill":1,"decode":3},
//                        "operation_id":"planner-7","drain_timeout_ms":60000}

#include "services/planner/planner.hpp"
#include "services/protocol/serving_messages.hpp"
#include "transport/cluster_config.hpp"

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::planner {

// The process kinds ([process.<kind>]) whose slots are the planner's prefill and decode
// instances: one process per instance, so a count of processes is a count of instances.
struct planner_kinds {
  std::string prefill, decode;
  bool switch_in_place = false; // their processes switch roles in place (cluster/join_policy)
};

// Why a topology cannot be planned, naming the table and key to change.
struct kinds_problem {
  std::vector<std::string> table; // {"process", "decode"} or {"planner"}
  std::string key;                // "roles", "per_process", "max_decode", ...
  std::string what;
};

struct kinds_or_problem {
  planner_kinds kinds;
  std::optional<kinds_problem> problem; // set: kinds is not usable
};

// Each role must be hosted by a process kind (only one can: instance names are per role), one
// instance per process (per_process = 1), not together with the other role, and [planner]
// max_<role> must fit the kind's slots (count): the supervisor scales within the config's slots.
kinds_or_problem planner_process_kinds(const transport::cluster_config& cluster,
                                       const planner_config& config);

// One kind's slots by phase in a status answer: serving, starting (a slot restarting after an
// exit counts as starting: it comes back by itself) and draining. Slots of other kinds and
// slots down for good (scaled down, given up) are not counted.
role_counts counts_of_kind(const nlohmann::json& status, const std::string& kind);

struct measured_latencies {
  std::optional<double> ttft_p90_ms, tpot_p90_ms; // none: no request in the window
};

// The sample at `at`: counts from `status`, latencies as measured, and from `stats` (none
// before the scheduler's first report) the live instances' load. `queued` is the scheduler's
// queue plus the requests waiting at decode instances whose batch is full (the cap, or
// `decode_max_batch`): those make requests wait there for a seat, not at the scheduler.
planner_sample make_sample(std::chrono::steady_clock::time_point at, const nlohmann::json& status,
                           const planner_kinds& kinds, const measured_latencies& latencies,
                           const protocol::cluster_stats* stats, int64_t decode_batch_cap,
                           int64_t decode_max_batch);

// Whether `d` changes a count of `from` (a batch cap alone does not need the supervisor).
bool changes_counts(const planner_decision& d, const planner_sample& from);

// The supervisor's scale request that applies `d`: its target counts by process kind (a P<->D
// switch is one fewer of one kind and one more of the other, in one request: no process changes
// its role in place).
nlohmann::json scale_request_for(const planner_decision& d, const planner_kinds& kinds,
                                 const std::string& operation_id,
                                 std::chrono::milliseconds drain_timeout);

} // namespace supernode::services::planner
