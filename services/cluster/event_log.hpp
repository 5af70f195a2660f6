#pragma once
// The supervisor's event log, <run_dir>/events.jsonl (0600): one JSON object per line, appended
// with one write each so a reader never sees half a line. Every object has `t` (unix seconds,
// fractional), `event`, `process` (the slot, "decode-1") and `pid`; the rest depends on the
// event:
//   spawned, ready                  -
//   exited, stopped                 `code` (exited normally) or `signal` ("SIGKILL") and
//                                   `signal_number` (9); stopped may carry `reason` instead
//   restarting                      `attempt` (1 for the first of a streak), `backoff_ms`
//   gave_up                         `reason`
//   draining                        - (scaled down: asked to leave; its stopped event follows)
//   switching                       `to`, the process kind it serves from now (a role switch
//                                   in place; its ready event follows)
//   hung                            `silent_ms`: its liveness file went untouched this long
//                                   (it is killed next, and its exit follows)
//   owner_gone                      `process` is "supervisor" and `pid` the owner's
//                                   (`cluster up --owner-pid`): it ended, so the cluster goes
//                                   down (each process's stopped event follows)

#include <filesystem>
#include <optional>
#include <string>
#include <sys/types.h>

namespace supernode::services::cluster {

struct exit_status;

class event_log {
public:
  explicit event_log(const std::filesystem::path& file); // created or appended to, 0600
  ~event_log();
  event_log(const event_log&) = delete;
  event_log& operator=(const event_log&) = delete;

  void spawned(const std::string& process, pid_t pid);
  void ready(const std::string& process, pid_t pid);
  void exited(const std::string& process, pid_t pid, const exit_status& status);
  // Ended by the supervisor (`down`) with `status`, or left stopped for `reason`.
  void stopped(const std::string& process, pid_t pid, const std::optional<exit_status>& status,
               const std::string& reason = "");
  void restarting(const std::string& process, pid_t pid, int attempt, long long backoff_ms);
  void gave_up(const std::string& process, pid_t pid, const std::string& reason);
  void hung(const std::string& process, pid_t pid, long long silent_ms);
  void draining(const std::string& process, pid_t pid);
  // Asked to serve process kind `to` in place (a role switch).
  void switching(const std::string& process, pid_t pid, const std::string& to);
  // The process the cluster was started for has ended.
  void owner_gone(pid_t owner);

private:
  int fd_ = -1;
};

// "SIGKILL" for 9; "SIG<number>" for a signal without a name.
std::string signal_name(int sig);

} // namespace supernode::services::cluster
