#pragma once
// The running side of `supernode chaos`: a thread that fires each process fault of the plan at
// its time (SIGKILL, or SIGSTOP then SIGCONT, to the pid the slot's process has at that moment) and
// a thread that samples the gateway's view of every instance (supernode_instance_alive on
// /metrics) so the report can say when a fault was noticed and when it healed. Plane faults fire
// themselves inside the processes (transport/fault_injection.hpp); the driver only notes when
// their window opened.

#include "services/chaos/fault_timing.hpp"
#include "services/loadgen/http_url.hpp"

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <sys/types.h>
#include <thread>
#include <vector>

namespace supernode::apps {

// Where a process fault finds its process: the pid a slot's process has now, 0 when none lives.
using slot_pid_finder = std::function<pid_t(const services::chaos::resolved_target&)>;
// A supervised cluster's: the pid file the supervisor keeps (<run_dir>/pids/<slot>.pid).
slot_pid_finder pids_from_files(std::filesystem::path pid_dir);
// Any cluster whose processes this one sees (a compose cluster's chaos service shares their PID
// namespace): the process running `supernode role PROCESS ... --id INDEX`, found in /proc.
slot_pid_finder pids_from_proc();

class chaos_driver {
public:
  chaos_driver(std::vector<services::chaos::fired_fault> faults, slot_pid_finder pid_of,
               std::vector<services::loadgen::http_url> gateways);
  ~chaos_driver(); // finish() if not called
  chaos_driver(const chaos_driver&) = delete;
  chaos_driver& operator=(const chaos_driver&) = delete;

  // Starts both threads; fault times count from `origin` (the load's start).
  void start(std::chrono::steady_clock::time_point origin);
  // Waits, at most `bound`, until every fault has fired and the gateway sees every instance
  // alive, then stops both threads. A fault that had not fired is noted so; a process still
  // stopped gets its SIGCONT.
  void finish(std::chrono::steady_clock::duration bound);

  // Valid after finish().
  const std::vector<services::chaos::fired_fault>& faults() const { return faults_; }
  const std::vector<services::chaos::liveness_sample>& samples() const { return samples_; }
  // The gateway's /metrics as the last scrape read it (after finish(): the run's totals).
  std::string last_metrics() const;

private:
  struct action {
    double at_s = 0;
    size_t fault = 0;
    int signal = 0; // 0: a plane or storage fault's window opens
  };

  double now_s() const;
  bool wait_until_s(double at_s); // false when stopping
  void fire_faults();
  void fire(const action& a);
  void monitor();
  void scrape();
  bool settled() const; // under mutex_

  std::vector<services::chaos::fired_fault> faults_;
  slot_pid_finder pid_of_;
  std::vector<services::loadgen::http_url> gateways_;
  std::chrono::steady_clock::time_point origin_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false, started_ = false, finished_ = false;
  size_t fired_actions_ = 0, actions_ = 0;
  std::map<size_t, pid_t> stopped_; // fault index -> pid awaiting SIGCONT
  std::vector<services::chaos::liveness_sample> samples_;
  std::map<std::string, bool> alive_; // the last scrape; empty when it failed
  std::string last_metrics_;          // the last scrape that answered
  std::thread firing_, monitoring_;
};

} // namespace supernode::apps
