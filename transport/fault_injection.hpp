#pragma once
// Plane faults for fault-injection runs (`supernode chaos`): frames this process sends on a
// flow are dropped, duplicated, corrupted or delayed, at a rate, during a window. Compiled in
// and inert: nothing happens unless the environment names a plan (SUPERNODE_FAULT_PLAN, a TOML
// file the chaos runner writes before it starts the cluster; children inherit the environment,
// so a restarted process reads the same plan and keeps the same clock):
//
//   [run]
//   epoch_s = 1764600000.25        # unix seconds every at_s counts from (optional, see below)
//   seed = 7
//   [[fault]]
//   kind = "drop"                  # drop | duplicate | corrupt | delay
//   flow = "control"
//   process = "decode-1"           # optional: only in this process slot (<process>-<index>)
//   at_s = 4.0
//   duration_s = 2.0
//   rate = 0.1                     # fraction of the flow's frames, drawn from the seed
//   delay_ms = 0                   # delay: how much later the frame leaves
//   [[storage_fault]]              # storage_faults.hpp: the MP server's SSD tier, object store
//   kind = "disk_full"             # disk_full | slow_store
//   process = "ems-0"              # optional, as above
//   at_s = 4.0
//   duration_s = 2.0
//   delay_ms = 0                   # slow_store: added to every read
//
// Without epoch_s the clock starts when the file "<plan>.epoch" appears holding it (looked for
// at most every 50 ms while frames are sent): the chaos runner's faults count from its load's
// start, which comes after the cluster is up, so it cannot be in the file the processes start
// with. Until then no fault applies.
//
// drop: the frame is not sent and the sender sees ok (a lossy network). duplicate: sent twice.
// corrupt: encoded, one payload byte flipped, then judged by the receiver's frame checks
// (decode_frame): refused, nothing arrives; accepted, the altered message arrives, as it would
// on a plane without integrity checks (the shm ring's MACs and CURVE would refuse every one).
// delay: handed to the plane delay_ms later from the injector's timer thread, never by blocking
// the sender.

#include "log/log.hpp"
#include "transport/message.hpp"
#include "transport/plane.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace supernode::transport {

struct instance_config;

enum class plane_fault_kind : uint8_t { drop = 0, duplicate, corrupt, delay };
inline constexpr size_t plane_fault_kind_count = 4;
const char* to_string(plane_fault_kind k);
std::optional<plane_fault_kind> plane_fault_kind_named(std::string_view name);

struct plane_fault {
  plane_fault_kind kind = plane_fault_kind::drop;
  std::string flow;
  std::string process; // a process slot ("decode-1"); empty: every process
  double at_s = 0;
  double duration_s = 0;
  double rate = 1;
  int64_t delay_ms = 0;
};

enum class storage_fault_kind : uint8_t { disk_full = 0, slow_store };
const char* to_string(storage_fault_kind k);
std::optional<storage_fault_kind> storage_fault_kind_named(std::string_view name);

struct storage_fault {
  storage_fault_kind kind = storage_fault_kind::disk_full;
  std::string process; // a process slot; empty: every process
  double at_s = 0;
  double duration_s = 0;
  int64_t delay_ms = 0;
};

// The whole plan file: plane faults and storage faults.
struct plane_fault_plan {
  std::optional<double> epoch_s;
  uint64_t seed = 0;
  std::vector<plane_fault> faults;
  std::vector<storage_fault> storage;
};

// The clock a plan's windows count from: its epoch_s, or the epoch file's once that appears
// (looked for at most every 50 ms). Not thread-safe: its owner locks.
class fault_epoch {
public:
  fault_epoch(std::optional<double> epoch_s, std::string epoch_file)
      : epoch_(epoch_s), file_(std::move(epoch_file)) {}
  // Seconds since the epoch at unix time `now`; nothing while the epoch is unknown. `started`
  // is set when this call learnt it.
  std::optional<double> since(double now, bool* started = nullptr);

private:
  std::optional<double> epoch_;
  std::string file_;
  double next_check_ = 0;
};

// The plan file the environment names, read once per process; nullptr when none is named.
const plane_fault_plan* process_fault_plan();
// "<plan>.epoch" next to it.
std::string process_fault_epoch_file();
// This process's slot ("<process>-<index>"), known once its first endpoint is made; empty
// before.
std::string process_fault_slot();

// The plan file's text, and back; parsing throws std::runtime_error naming source, line and key.
std::string plane_fault_plan_text(const plane_fault_plan& plan);
plane_fault_plan parse_plane_fault_plan(std::string_view text, const std::string& source);

// The environment variable naming the plan file.
inline constexpr const char* fault_plan_env = "SUPERNODE_FAULT_PLAN";

// One endpoint's injector: the plan's faults that apply in its process.
class fault_injector {
public:
  using send_function = std::function<send_status(const envelope&)>;
  using clock_function = std::function<double()>; // unix seconds

  // `process_slot` is "<process>-<index>", what a fault's `process` names; `epoch_file` is
  // where the epoch appears when the plan has none.
  fault_injector(plane_fault_plan plan, const std::string& process_slot, log::logger logger,
                 std::string epoch_file = {}, clock_function now = {});
  ~fault_injector();
  fault_injector(const fault_injector&) = delete;
  fault_injector& operator=(const fault_injector&) = delete;

  // The injector for `self` from the plan file the environment names, read once per process;
  // nullptr when no plan is named or none of its faults applies to self's process. A plan that
  // cannot be read is an error the process should die of (the run would test nothing).
  static std::unique_ptr<fault_injector> from_environment(const instance_config& self,
                                                          const log::logger& logger);

  // Sends one frame of `flow` through `send`, or not, or twice, or later, as the plan says now.
  send_status send(const std::string& flow, const envelope& message, const send_function& send);

  // Frames each kind acted on so far (faults_injected by kind).
  uint64_t injected(plane_fault_kind k) const { return injected_[static_cast<size_t>(k)].load(); }
  // Corrupted frames the receiver's checks would have refused (so nothing was delivered).
  uint64_t corrupt_refused() const { return corrupt_refused_.load(); }

private:
  struct window_state {
    plane_fault fault;
    uint64_t rng = 0;
    uint64_t seen = 0, acted = 0;
    bool announced = false, summarised = false;
  };
  struct delayed_send {
    envelope message;
    send_function send;
  };

  // The fault that takes this frame now, if any (the first open window whose draw hits).
  const plane_fault* pick(const std::string& flow, double now);
  void note_closed_windows(double now);
  send_status corrupt(const envelope& message, const send_function& send);
  void run_timer();

  plane_fault_plan plan_;
  log::logger log_;
  clock_function now_;
  fault_epoch epoch_; // under mutex_
  std::mutex mutex_;
  std::vector<window_state> windows_;
  std::array<std::atomic<uint64_t>, plane_fault_kind_count> injected_{};
  std::atomic<uint64_t> corrupt_refused_{0};
  uint64_t corrupt_rng_ = 0;

  std::condition_variable timer_wake_;
  std::multimap<std::chrono::steady_clock::time_point, delayed_send> delayed_;
  bool stopping_ = false;
  std::thread timer_;
};

} // namespace supernode::transport
