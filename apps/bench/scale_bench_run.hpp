#pragma once
// One run of `bench scale`: a cluster brought up from a config text, a planned request stream
// sent through its gateway, and what happened meanwhile — instances per role (from the
// supervisor's status, polled), the scale events (from its events.jsonl) and when each new
// instance first had work (from /metrics, polled) — all on the run's clock: seconds since the
// first request was due.

#include "apps/bench/scale_script.hpp"
#include "services/loadgen/request_outcome.hpp"
#include "services/loadgen/workload.hpp"
#include "services/planner/planner_sampler.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace supernode::apps {

// Instances of the two roles at one moment: alive (starting, serving or draining) and serving.
struct scale_moment {
  double t = 0;
  int prefill = 0, decode = 0;
  int prefill_serving = 0, decode_serving = 0;
};

// A slot started or drained during the run.
struct scale_event {
  std::string slot;              // "decode-1"
  std::string role;              // "prefill" or "decode"
  bool start = true;             // started (else drained)
  double command_s = 0;          // the supervisor acted on the command: spawned, or asked to drain
  std::optional<double> ready_s; // start: printed "ready"
  std::optional<double> first_served_s; // start: first poll with work on it (queued or running)
  std::optional<double> gone_s;         // drain: its process ended
  std::string switched_to; // a role switch in place to this kind (start-like: ready_s is when
                           // the process served again)
};

struct scale_run_config {
  std::string name;        // "planner", "fixed-smallest", "fixed-largest"
  std::string config_text; // the cluster, its name and run folder its own
  std::filesystem::path run_dir;
  std::filesystem::path model;
  services::planner::planner_kinds kinds;
  // Counts to reach through the supervisor before the load starts (the planner run starts
  // small); empty: as the config starts them.
  std::map<std::string, int> start_counts;
  double duration_s = 0; // the load lasts this long; the run waits for the last answer
  double poll_interval_s = 0.25;
  // Scale operations sent to the supervisor while the load runs, one after another (each
  // waits for the answer of the one before): the scripted run.
  std::vector<scripted_scale> script;
};

struct scale_run_result {
  std::string name;
  std::vector<services::loadgen::request_outcome> outcomes;
  std::vector<scale_moment> timeline;
  std::vector<scale_event> events;
  // The planner's log lines (gateway-0's "planner: ..."): each decision with its reason.
  std::vector<std::string> planner_log;
  double duration_s = 0; // to the last answer
  std::vector<scripted_outcome> script;
  std::vector<ep_reform> ep_reforms; // every group re-formation during the run
};

scale_run_result run_scale_once(const scale_run_config& config,
                                const std::vector<services::loadgen::planned_request>& plan);

} // namespace supernode::apps
