#pragma once
// A fault-injection plan (`supernode chaos --faults PLAN.toml`): a list of faults, each fired at
// its time after the load starts.
//
//   [[fault]]
//   at_s = 4.0              # seconds after the load starts
//   kind = "kill"           # kill | stop | drop | delay | duplicate | corrupt | disk_full |
//   slow_store target = "decode-1"     # an instance ("decode-1") or a process slot
//   ("<process>-<index>"), # role = "decode"       # ... or one instance of a role, picked from the
//   run's seed duration_s = 3.0        # stop: until SIGCONT; plane and storage faults: the window
//   rate = 0.1              # plane faults: the fraction of frames taken (default 1)
//   delay_ms = 200          # delay: how much later a frame leaves
//   flow = "control"        # plane faults: the flow whose frames are taken (control, bulk, ems,
//   ...)
//
// A target that is both an instance name and a process slot means the instance (with ranks as
// threads, instance "decode-1" may live in process slot "decode-0"). kill and stop need a target
// or role; a plane or storage fault without one applies in every process. disk_full fails the
// MP servers' SSD-tier writes with ENOSPC for duration_s; slow_store adds delay_ms to every
// object-store read (transport/storage_faults.hpp).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::transport {
struct cluster_config;
}

namespace supernode::services::chaos {

enum class fault_kind : uint8_t {
  kill,
  stop,
  drop,
  delay,
  duplicate,
  corrupt,
  disk_full,
  slow_store
};
const char* to_string(fault_kind k);
// drop, delay, duplicate, corrupt: frames on a flow (transport/fault_injection.hpp).
bool is_plane_fault(fault_kind k);
// kill, stop: signals to a process.
bool is_process_fault(fault_kind k);

struct fault_spec {
  size_t index = 0; // position in the plan, for messages
  fault_kind kind = fault_kind::kill;
  double at_s = 0;
  std::string target; // empty: see role
  std::string role;   // empty: see target; both empty: every process (plane faults only)
  double duration_s = 0;
  double rate = 1;
  int64_t delay_ms = 0;
  std::string flow;
};

struct fault_plan {
  std::vector<fault_spec> faults; // in file order
};

// Throws std::runtime_error "<source>:<line>: [fault.<index>] <key> <what>" on a bad plan: an
// unknown key, a wrong type, a value out of range, or a key the fault's kind needs missing.
fault_plan parse_fault_plan(std::string_view text, const std::string& source);
fault_plan load_fault_plan(const std::filesystem::path& file);

// Where a fault lands: the process slot to signal (pid file <run_dir>/pids/<slot>.pid) and the
// instances it hosts.
struct resolved_target {
  std::string process; // [process.NAME]
  int index = 0;       // of that process
  std::string slot;    // "<process>-<index>"
  std::vector<std::string> instances;
  std::string named; // what the report calls the target: the plan's name or the role's pick
};

// Pure: the same plan, config and seed always give the same answer. nullopt for a fault with
// neither target nor role. Throws std::runtime_error naming the fault's index and the target
// (or role) when the config has no such instance, process slot or role.
std::optional<resolved_target>
resolve_target(const fault_spec& fault, const transport::cluster_config& cluster, uint64_t seed);

} // namespace supernode::services::chaos
