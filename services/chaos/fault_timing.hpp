#pragma once
// When the system noticed a fault and when it was whole again, from what the runner saw: the
// supervisor's event log (<run_dir>/events.jsonl: spawned, ready, exited, ... per process slot)
// when there is one, and the gateway's view of each instance (supernode_instance_alive on
// /metrics, sampled while the run lasts). Pure, so the rules are tested on made-up histories.
//
//   kill   detected: the slot's first "exited" event at or after the fault, else the first
//          sample showing one of its instances not alive; recovered: the slot's first "ready"
//          event after that, else the first sample after detection with every instance of the
//          slot alive again.
//   stop   the same, but a stopped process does not exit: detection is normally the gateway
//          declaring it down (past the liveness bound), recovery its return after SIGCONT.
//   plane  and storage faults have no process to watch: both stay unknown.

#include "services/chaos/chaos_report.hpp"
#include "services/chaos/fault_plan.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::services::chaos {

struct process_event {
  double t_s = 0; // seconds since the load started
  std::string event;
  std::string process; // slot name, "decode-1"
};

// The lines of an events.jsonl ({"t": unix seconds, "event": ..., "process": ...}), with times
// made relative to `origin_unix` (the load's start). Lines that are not such objects are skipped.
std::vector<process_event> parse_process_events(std::string_view jsonl, double origin_unix);

struct liveness_sample {
  double t_s = 0;
  std::string instance;
  bool alive = false;
};

struct fired_fault {
  fault_spec spec;
  std::optional<resolved_target> target;
  bool fired = false;
  double fired_s = 0; // when the runner acted (or the window opened)
  std::string note;   // why it could not act, if it could not
};

fault_record time_fault(const fired_fault& fault, const std::vector<process_event>& events,
                        const std::vector<liveness_sample>& samples);

} // namespace supernode::services::chaos
