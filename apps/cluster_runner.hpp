#pragma once
// `supernode cluster up|status|down`: one OS process per process instance of a config on this
// host, started from this binary as `supernode role NAME --id I`, each with its log and pid
// file in the config's run folder (run_dir/logs, run_dir/pids), so a later command finds them.
// `up` leaves a supervisor (`cluster supervise`, services/cluster/supervisor.hpp) owning them: it
// restarts a dead one per [process.X] restart, logs to run_dir/events.jsonl and answers
// `status` and `down` on run_dir/supervisor.sock; without one, status and down go by pid files.

#include "apps/serving_setup.hpp"

#include <filesystem>

namespace supernode::apps {

// Starts the supervisor, which starts every process, and waits until each prints "ready"; on any
// failure everything is stopped and it returns 1 with the failing process's log tail on stderr.
// With an `owner_pid` (not 0), the cluster goes down by itself when that process ends.
int cluster_up(const serving_setup& setup, const std::filesystem::path& config_file,
               pid_t owner_pid = 0);
// The supervisor itself (run by `up` in a session of its own): until `down` (or its owner's
// end); 1 when the start failed.
int cluster_supervise(const serving_setup& setup, const std::filesystem::path& config_file,
                      const std::filesystem::path& model, pid_t owner_pid = 0);
// One line per process: its state (running, starting, restarting, gave_up, stopped), pid and
// restarts; returns 0 when all run and are ready.
// Every slot with its state and phase (starting, serving, draining, down); with `json`, the
// supervisor's whole answer as one line. 0 when every slot is serving.
int cluster_status(const serving_setup& setup, bool json = false);

// `cluster scale PROCESS=COUNT...`: asks the supervisor for the counts and waits until they are
// reached (started slots ready, scaled-down ones gone); prints what changed and took_s, or the
// supervisor's whole answer with `json`. 0 when done, 1 when refused or failed.
struct scale_options {
  std::map<std::string, int> counts;
  std::string operation_id;
  std::chrono::seconds drain_timeout{60};
  std::string drain;         // "finish", "migrate" or "" (each process's [decode] drain)
  bool switch_roles = false; // prefill and decode processes switch roles in place where they can
  bool json = false;
};
int cluster_scale(const serving_setup& setup, const scale_options& options);
// SIGTERM to every process, SIGKILL to any still alive after `grace` (through the supervisor,
// which then ends; by pid files when none runs); returns 0.
int cluster_down(const serving_setup& setup, std::chrono::seconds grace = std::chrono::seconds(15));

} // namespace supernode::apps
