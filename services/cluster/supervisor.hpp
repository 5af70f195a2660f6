#pragma once
// The supervisor `cluster up` leaves running: it owns a cluster's processes on this host,
// starts each slot, waits on their pidfds, restarts one that ended per its restart_policy,
// keeps <run_dir>/pids/<slot>.pid naming the live pid (gone while none lives), logs every
// spawn, ready, exit, restart and give-up to <run_dir>/events.jsonl (event_log.hpp), removes
// the shm segments a dead process created, and answers on <run_dir>/supervisor.sock
// (control_socket.hpp), one JSON line each way:
//
//   {"request":"status"}  → {"ok":true,"supervisor_pid":P,"processes":[{"process":"decode-1",
//                            "state":"running"|"restarting"|"gave_up"|"stopped","ready":B,
//                            "phase":"starting"|"serving"|"draining"|"down",
//                            "serves":"decode","instances":["decode-2"],
//                            "pid":N,"restarts":R,"log":"...","last_exit":{"code":C} or
//                            {"signal":"SIGKILL","signal_number":9} or null}]}
//   {"request":"scale","counts":{"decode":1},"operation_id":"op-7","drain_timeout_ms":60000,
//    "switch":false}
//                         → once the slots it starts are ready and those it scales down are gone
//                            (drained: SIGTERM, or SIGUSR1/SIGUSR2 for "drain":"finish"/"migrate";
//                            SIGKILL past the drain timeout): {"ok":true,"took_s":T,
//                            "started":[...],"stopped":[...],"switched":[...],"drain_killed":B};
//                            with "switch":true, running prefill and decode processes switch
//                            roles in place where that reaches the counts (scale_plan.hpp),
//                            answered once they serve again; a repeat of the
//                            operation id gets the same answer; another operation while one runs
//                            or the id with other counts: {"ok":false,"conflict":true,...}.
//                            Slots are the config's, and beyond them new slots of processes
//                            that join (scale_plan.hpp). A scaled-down slot is not restarted;
//                            status shows it "stopped", phase "down".
//   {"request":"down","grace_ms":G} → SIGINT to every child (stop now: nobody would be left to
//                            take work a drain hands over), SIGKILL to those alive after G,
//                            no more restarts; answered once all are gone with
//                            {"ok":true,"stopped":N,"killed":K}; then run() returns.
//
// With an owner (supervisor_options::owner_pid), the owner's end is a `down` too.
//
// A ready slot with a liveness probe whose file goes untouched past its timeout is SIGKILLed
// (event "hung", with how long it was silent) and then ends like any killed process.
// A slot is ready when its log holds a line starting with "ready" (watched with inotify). Until
// every slot has been ready once, a slot that exits, or a start that takes longer than
// start_timeout, fails the start: on_start hears of it, everything is stopped and run() returns
// 1. A restarted slot's previous log is kept as <log>.1, the previous run's events.jsonl as
// events.jsonl.1.
//
//   spawned ──exit──▶ (policy) ──restart──▶ restarting ──back-off──▶ spawned
//      │                       ──give up──▶ gave_up
//      │                       ──leave────▶ stopped
//      └──down──▶ stopped

#include "services/cluster/process_launcher.hpp"
#include "services/cluster/restart_policy.hpp"
#include "services/cluster/role_launch.hpp"
#include "services/cluster/scale_plan.hpp"

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::cluster {

struct supervised_process {
  std::string name; // the slot: "decode-1"
  // Launched afresh at every start; its output must go to spec.log_file (watched for "ready").
  launch_spec spec;
  restart_rules rules;
  // Liveness probe, off when zero: the child gets SUPERNODE_LIVENESS_FILE naming `liveness_file`
  // and touches it while its actors run (actors/role/liveness_beacon.hpp); once ready, a file
  // untouched for `liveness_timeout` means a hung process, killed (event "hung") and so
  // restarted by its policy, as a liveness probe of an orchestrator would.
  std::chrono::milliseconds liveness_timeout{0};
  std::filesystem::path liveness_file;
};

struct supervisor_options {
  std::filesystem::path run_dir; // pids/, events.jsonl, supervisor.sock (made private)
  // The cluster whose shm segments a dead child created are removed; empty: none are.
  std::string cluster;
  std::chrono::milliseconds start_timeout{std::chrono::seconds(180)};
  // Grace before SIGKILL when the start failed or SIGTERM/SIGINT asked for the end.
  std::chrono::milliseconds stop_grace{std::chrono::seconds(15)};
  // Called once: every slot ready (nothing), or why the start failed.
  std::function<void(const std::optional<start_failure>&)> on_start;
  // SIGTERM and SIGINT mean `down` (blocked and read from a signalfd: the caller's only thread).
  bool stop_on_signals = false;
  // When this process ends, the cluster goes down as on `down` (event "owner_gone"): what a
  // test harness asks for (`cluster up --owner-pid`), so a test killed at its timeout leaves no
  // cluster behind. It must be alive when run() begins. 0: no owner.
  pid_t owner_pid = 0;
  // Kinds whose processes can join at run time, so a scale may ask for more than the config's
  // slots (scale_plan.hpp), and the slot that starts one ("decode-2": `role decode --join ...`).
  join_refusals joins;
  join_group_sizes join_groups; // ranks per group past the slots, for grouped kinds
  std::function<supervised_process(const std::string& slot)> make_joined_slot;
  // Kinds whose processes switch roles in place (`"switch":true`), and the role each serves: a
  // switched slot's process gets the role-switch signal, and restarts with `--as ROLE`.
  switchable_kinds switchable;
};

class supervisor {
public:
  supervisor(supervisor_options options, std::vector<supervised_process> processes);
  ~supervisor();
  supervisor(const supervisor&) = delete;
  supervisor& operator=(const supervisor&) = delete;

  // Starts every slot and supervises them until `down`; 0 then, 1 when the start failed.
  // Throws std::runtime_error when it cannot begin (the socket is taken, the run folder is not
  // private).
  int run();

private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

} // namespace supernode::services::cluster
