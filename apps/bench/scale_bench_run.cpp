#include "apps/bench/scale_bench_run.hpp"

#include "apps/bench/cache_bench_cluster.hpp"
#include "services/cluster/control_socket.hpp"
#include "services/cluster/role_launch.hpp"
#include "services/cluster/scale_plan.hpp"
#include "services/loadgen/http_client.hpp"
#include "services/loadgen/load_runner.hpp"
#include "services/loadgen/prometheus_text.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace supernode::apps {

namespace fs = std::filesystem;
namespace lg = services::loadgen;
namespace cl = services::cluster;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

// The role a slot of the planner's kinds hosts ("" for the others).
std::string role_of_slot(const std::string& slot, const services::planner::planner_kinds& kinds) {
  const auto kind = cl::process_kind_of(slot);
  return kind == kinds.prefill ? "prefill" : kind == kinds.decode ? "decode" : "";
}

// Its instance: one per process, numbered like the slot ("d-1" of a decode kind: decode-1).
std::string instance_of_slot(const std::string& slot, const std::string& role) {
  return role + slot.substr(cl::process_kind_of(slot).size());
}

// What the poller saw, on the run's clock.
struct observations {
  std::mutex mutex;
  std::vector<scale_moment> timeline;
  std::map<std::string, std::vector<double>> busy; // instance -> polls with a sequence on it
};

// Polls the supervisor's status and the gateway's /metrics until stopped.
class run_poller {
public:
  run_poller(const scale_run_config& config, uint16_t port,
             std::chrono::steady_clock::time_point t0)
      : config_(config), url_(lg::parse_http_url("http://127.0.0.1:" + std::to_string(port))),
        t0_(t0), thread_([this] { loop(); }) {}
  ~run_poller() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  observations seen;

private:
  void poll() {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    try {
      const auto answer = cl::ask_control(config_.run_dir / "supervisor.sock",
                                          json{{"request", "status"}}.dump(), 5s);
      const json status = answer ? json::parse(*answer, nullptr, false) : json();
      if (status.is_object()) {
        using services::planner::counts_of_kind;
        const auto p = counts_of_kind(status, config_.kinds.prefill);
        const auto d = counts_of_kind(status, config_.kinds.decode);
        std::lock_guard lock(seen.mutex);
        seen.timeline.push_back({t, p.serving + p.starting + p.draining,
                                 d.serving + d.starting + d.draining, p.serving, d.serving});
      }
      const lg::metrics_snapshot m(lg::http_get_ok(url_, "/metrics", 5));
      std::lock_guard lock(seen.mutex);
      // Work on an instance: a sequence in its batch or queued at it, or (prefill, whose
      // batches are over in milliseconds) prompt tokens assigned to it.
      for (const char* role : {"prefill", "decode"})
        for (int i = 0; i < 64; ++i) {
          const std::string name = std::string(role) + "-" + std::to_string(i);
          double work = 0;
          for (const char* gauge : {"supernode_instance_running", "supernode_instance_waiting",
                                    "supernode_prefill_outstanding_tokens"})
            work += m.value(gauge, {{"instance", name}}).value_or(0.0);
          if (work > 0) seen.busy[name].push_back(t);
        }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[bench scale] %s: a poll failed: %s\n", config_.name.c_str(), e.what());
    }
  }
  void loop() {
    const auto every = std::chrono::duration<double>(config_.poll_interval_s);
    std::unique_lock lock(mutex_);
    while (!stop_) {
      lock.unlock();
      poll();
      lock.lock();
      cv_.wait_for(lock, every, [this] { return stop_; });
    }
  }

  const scale_run_config& config_;
  lg::http_url url_;
  std::chrono::steady_clock::time_point t0_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The start and drain events of the planner's kinds from events.jsonl, from `unix_t0` on.
std::vector<scale_event> read_events(const scale_run_config& config, double unix_t0,
                                     const std::map<std::string, std::vector<double>>& busy) {
  std::vector<scale_event> out;
  std::istringstream lines(cl::read_text_file(config.run_dir / "events.jsonl"));
  std::map<std::string, size_t> open; // slot -> its event not ended yet
  for (std::string line; std::getline(lines, line);) {
    const json e = json::parse(line, nullptr, false);
    if (!e.is_object()) continue;
    const double t = e.value("t", 0.0) - unix_t0;
    const std::string slot = e.value("process", std::string()), what = e.value("event", "");
    const std::string role = role_of_slot(slot, config.kinds);
    if (t < 0 || role.empty()) continue;
    if (what == "spawned" || what == "draining" || what == "switching") {
      open[slot] = out.size();
      out.push_back({slot,
                     role,
                     what != "draining",
                     t,
                     {},
                     {},
                     {},
                     what == "switching" ? e.value("to", std::string()) : ""});
      continue;
    }
    const auto it = open.find(slot);
    if (it == open.end()) continue;
    scale_event& ev = out[it->second];
    if (what == "ready" && ev.start) {
      ev.ready_s = t;
      open.erase(it);
    } else if ((what == "stopped" || what == "exited") && !ev.start) {
      ev.gone_s = t;
      open.erase(it);
    }
  }
  for (auto& ev : out) {
    if (!ev.start || !ev.ready_s || !ev.switched_to.empty()) continue;
    const auto b = busy.find(instance_of_slot(ev.slot, ev.role));
    if (b == busy.end()) continue;
    for (double t : b->second)
      if (t >= *ev.ready_s) {
        ev.first_served_s = t;
        break;
      }
  }
  return out;
}

void reach_start_counts(const scale_run_config& config) {
  if (config.start_counts.empty()) return;
  const json request{{"request", "scale"},
                     {"counts", config.start_counts},
                     {"operation_id", "bench-start"},
                     {"drain_timeout_ms", 60000}};
  const auto answer =
      cl::ask_control(config.run_dir / "supervisor.sock", request.dump(), std::chrono::minutes(5));
  const json reply = answer ? json::parse(*answer, nullptr, false) : json();
  if (!reply.is_object() || !reply.value("ok", false))
    throw std::runtime_error(config.name + ": the supervisor did not reach the start counts " +
                             request["counts"].dump() + ": " + (answer ? *answer : "no answer"));
}

// Sends the script's operations at their times, each once the one before was answered.
class script_runner {
public:
  script_runner(const scale_run_config& config, std::chrono::steady_clock::time_point t0)
      : config_(config), t0_(t0) {
    if (!config.script.empty()) thread_ = std::thread([this] { run(); });
  }
  ~script_runner() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::vector<scripted_outcome> outcomes; // after join()

private:
  void run() {
    for (const auto& step : config_.script) {
      std::this_thread::sleep_until(t0_ + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::duration<double>(step.at_s)));
      json request{{"request", "scale"},
                   {"counts", step.counts},
                   {"operation_id", "bench-script-" + std::to_string(outcomes.size())},
                   {"drain_timeout_ms", 60000}};
      if (!step.drain.empty()) request["drain"] = step.drain;
      if (step.switch_roles) request["switch"] = true;
      const double sent =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      std::fprintf(stderr, "[bench scale] %s: %.1f s: %s\n", config_.name.c_str(), sent,
                   step.text.c_str());
      const auto answer = cl::ask_control(config_.run_dir / "supervisor.sock", request.dump(),
                                          std::chrono::minutes(5));
      outcomes.push_back({step, sent, answer.value_or("")});
    }
  }

  const scale_run_config& config_;
  std::chrono::steady_clock::time_point t0_;
  std::thread thread_;
};

std::vector<std::string> instance_logs(const fs::path& run_dir) {
  std::vector<std::string> texts;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_dir / "logs", ec))
    if (entry.path().extension() == ".log") texts.push_back(cl::read_text_file(entry.path()));
  return texts;
}

} // namespace

scale_run_result run_scale_once(const scale_run_config& config,
                                const std::vector<lg::planned_request>& plan) {
  cache_bench_cluster cluster(config.run_dir, config.config_text, config.model, "bench scale");
  std::fprintf(stderr, "[bench scale] %s: starting the cluster (config %s)\n", config.name.c_str(),
               cluster.config_file().c_str());
  const uint16_t port = cluster.up();
  reach_start_counts(config);

  lg::run_options o;
  o.url = lg::parse_http_url("http://127.0.0.1:" + std::to_string(port));
  o.model = lg::fetch_served_model(o.url, 30).id;
  o.timeout_s = 600;
  // The poller and the events use the clock the outcomes count from: the first request's.
  const auto t0 = std::chrono::steady_clock::now();
  const double unix_t0 =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  o.on_progress = [&](const lg::run_progress& p) {
    if (static_cast<int64_t>(p.elapsed_s * 4) % 20 == 0) // about every 5 s
      std::fprintf(stderr, "[bench scale] %s: %.0f s, %lld of %lld done, %lld failed\n",
                   config.name.c_str(), p.elapsed_s, static_cast<long long>(p.done),
                   static_cast<long long>(p.total), static_cast<long long>(p.failed));
  };
  o.progress_interval_s = 0.25;
  scale_run_result r;
  r.name = config.name;
  {
    run_poller poller(config, port, t0);
    script_runner script(config, t0);
    auto result = lg::run_load(plan, o);
    script.join();
    r.script = std::move(script.outcomes);
    r.outcomes = std::move(result.outcomes);
    r.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard lock(poller.seen.mutex);
    r.timeline = poller.seen.timeline;
    r.events = read_events(config, unix_t0, poller.seen.busy);
  }
  for (const auto& line :
       cl::lines_starting(cl::read_text_file(config.run_dir / "logs" / "gateway-0.log"), ""))
    if (const auto at = line.find("planner: "); at != std::string::npos)
      r.planner_log.push_back(line.substr(0, 24) + " " + line.substr(at));
  r.ep_reforms = ep_reforms_in(instance_logs(config.run_dir), unix_t0);
  cluster.succeeded();
  return r;
}

} // namespace supernode::apps
