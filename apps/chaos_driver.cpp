#include "apps/chaos_driver.hpp"

#include "services/loadgen/http_client.hpp"
#include "services/loadgen/prometheus_text.hpp"

#include <algorithm>
#include <csignal>
#include <fstream>

namespace supernode::apps {

namespace chaos = services::chaos;
namespace lg = services::loadgen;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr auto scrape_interval = std::chrono::milliseconds(100);

// The pid the slot's pid file holds now, if that process exists.
pid_t live_pid(const std::filesystem::path& pid_file) {
  std::ifstream in(pid_file);
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0 || ::kill(pid, 0) != 0) return 0;
  return pid;
}

// A process's arguments, from /proc/PID/cmdline (NUL-separated); empty when it is gone.
std::vector<std::string> arguments_of(const std::filesystem::path& proc_dir) {
  std::ifstream in(proc_dir / "cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  return args;
}

// `supernode role PROCESS [...] --id INDEX`, as cluster up and the compose files start a slot.
bool runs_slot(const std::vector<std::string>& args, const chaos::resolved_target& slot) {
  if (args.size() < 3 || args[1] != "role" || args[2] != slot.process) return false;
  for (size_t i = 3; i + 1 < args.size(); ++i)
    if (args[i] == "--id") return args[i + 1] == std::to_string(slot.index);
  return slot.index == 0; // role's --id defaults to 0
}

} // namespace

slot_pid_finder pids_from_files(std::filesystem::path pid_dir) {
  return [dir = std::move(pid_dir)](const chaos::resolved_target& slot) {
    return live_pid(dir / (slot.slot + ".pid"));
  };
}

slot_pid_finder pids_from_proc() {
  return [](const chaos::resolved_target& slot) -> pid_t {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
      const auto name = entry.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (runs_slot(arguments_of(entry.path()), slot)) return static_cast<pid_t>(std::stol(name));
    }
    return 0;
  };
}

chaos_driver::chaos_driver(std::vector<chaos::fired_fault> faults, slot_pid_finder pid_of,
                           std::vector<lg::http_url> gateways)
    : faults_(std::move(faults)), pid_of_(std::move(pid_of)), gateways_(std::move(gateways)) {}

chaos_driver::~chaos_driver() {
  finish(std::chrono::seconds(0));
}

double chaos_driver::now_s() const {
  return std::chrono::duration<double>(clock_type::now() - origin_).count();
}

bool chaos_driver::wait_until_s(double at_s) {
  const auto due = origin_ + std::chrono::duration_cast<clock_type::duration>(
                                 std::chrono::duration<double>(at_s));
  std::unique_lock lock(mutex_);
  wake_.wait_until(lock, due, [&] { return stopping_; });
  return !stopping_;
}

void chaos_driver::start(clock_type::time_point origin) {
  origin_ = origin;
  started_ = true;
  firing_ = std::thread([this] { fire_faults(); });
  monitoring_ = std::thread([this] { monitor(); });
}

void chaos_driver::fire_faults() {
  std::vector<action> plan;
  for (size_t i = 0; i < faults_.size(); ++i) {
    const auto& f = faults_[i].spec;
    if (f.kind == chaos::fault_kind::kill) {
      plan.push_back({f.at_s, i, SIGKILL});
    } else if (f.kind == chaos::fault_kind::stop) {
      plan.push_back({f.at_s, i, SIGSTOP});
      plan.push_back({f.at_s + f.duration_s, i, SIGCONT});
    } else {
      plan.push_back({f.at_s, i, 0});
    }
  }
  std::stable_sort(plan.begin(), plan.end(),
                   [](const action& a, const action& b) { return a.at_s < b.at_s; });
  {
    std::lock_guard lock(mutex_);
    actions_ = plan.size();
  }
  for (const auto& a : plan) {
    if (!wait_until_s(a.at_s)) return;
    fire(a);
    std::lock_guard lock(mutex_);
    ++fired_actions_;
    wake_.notify_all();
  }
}

void chaos_driver::fire(const action& a) {
  auto& f = faults_[a.fault];
  std::unique_lock lock(mutex_);
  if (a.signal == SIGCONT) {
    auto it = stopped_.find(a.fault);
    if (it == stopped_.end()) return;
    ::kill(it->second, SIGCONT);
    stopped_.erase(it);
    return;
  }
  if (a.signal == 0) {
    f.fired = true;
    f.fired_s = f.spec.at_s; // the window opens on the processes' own clocks
    return;
  }
  const pid_t pid = pid_of_(*f.target);
  if (pid == 0) {
    f.note = "not fired: no live process of slot " + f.target->slot;
    return;
  }
  // Stamped before the signal: the victim can die and its supervisor log the exit before this
  // thread runs again, and an exit stamped before the fault would not count as its detection.
  const double sent_s = now_s();
  if (::kill(pid, a.signal) != 0) {
    f.note = "not fired: kill(" + std::to_string(pid) + ") failed";
    return;
  }
  f.fired = true;
  f.fired_s = sent_s;
  if (a.signal == SIGSTOP) stopped_[a.fault] = pid;
}

void chaos_driver::monitor() {
  for (;;) {
    scrape();
    std::unique_lock lock(mutex_);
    wake_.notify_all(); // finish() waits on what scrapes see
    if (wake_.wait_for(lock, scrape_interval, [&] { return stopping_; })) return;
  }
}

void chaos_driver::scrape() {
  for (const auto& url : gateways_) {
    const auto r = lg::http_request(url, "GET", "/metrics", "", std::chrono::seconds(1));
    if (!r.error.empty() || r.status != 200) continue;
    const lg::metrics_snapshot snap(r.body);
    const double t = now_s();
    std::lock_guard lock(mutex_);
    last_metrics_ = r.body;
    alive_.clear();
    for (const auto& s : snap.samples()) {
      if (s.name != "supernode_instance_alive") continue;
      for (const auto& [key, value] : s.labels)
        if (key == "instance") alive_[value] = s.value > 0;
    }
    // The gateway reports the others; it is alive itself when it answers.
    for (const auto& [instance, up] : alive_) {
      auto last = std::find_if(samples_.rbegin(), samples_.rend(),
                               [&](const auto& x) { return x.instance == instance; });
      if (last == samples_.rend() || last->alive != up) samples_.push_back({t, instance, up});
    }
    return;
  }
  std::lock_guard lock(mutex_);
  alive_.clear(); // no gateway answered: nothing is known to be alive
}

std::string chaos_driver::last_metrics() const {
  std::lock_guard lock(mutex_);
  return last_metrics_;
}

bool chaos_driver::settled() const {
  if (fired_actions_ < actions_) return false;
  if (alive_.empty()) return false;
  return std::all_of(alive_.begin(), alive_.end(), [](const auto& kv) { return kv.second; });
}

void chaos_driver::finish(clock_type::duration bound) {
  if (!started_ || finished_) return;
  {
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, bound, [&] { return settled(); });
    stopping_ = true;
    for (const auto& [fault, pid] : stopped_) ::kill(pid, SIGCONT);
    stopped_.clear();
  }
  wake_.notify_all();
  firing_.join();
  monitoring_.join();
  finished_ = true;
  for (auto& f : faults_)
    if (!f.fired && f.note.empty()) f.note = "not fired: the run ended first";
}

} // namespace supernode::apps
