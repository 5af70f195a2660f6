#include "services/gateway/planner_runner.hpp"

#include "services/planner/planner_metrics.hpp"

#include <nlohmann/json.hpp>

namespace supernode::services::gateway {

namespace {
using json = nlohmann::json;
using namespace std::chrono_literals;

// A status answer comes at once; a supervisor busy with a scale still answers status.
constexpr auto status_timeout = 5s;

// "started decode-2; stopped prefill-1": what a finished scale request changed.
std::string changes_text(const json& answer) {
  std::string out;
  for (const char* what : {"started", "stopped"})
    for (const auto& slot : answer.value(what, json::array()))
      out += (out.empty() ? "" : "; ") + std::string(what) + " " + slot.get<std::string>();
  return out.empty() ? "nothing changed" : out;
}
} // namespace

planner_runner::planner_runner(planner::planner_config config, planner::planner_limits limits,
                               planner::planner_kinds kinds, planner_hooks hooks, log::logger log,
                               std::string operation_prefix)
    : kinds_(std::move(kinds)), hooks_(std::move(hooks)),
      operation_prefix_(std::move(operation_prefix)), log_(std::move(log)), limits_(limits),
      planner_(config, limits) {}

planner_runner::~planner_runner() {
  stop();
}

void planner_runner::start() {
  const auto period = std::max<std::chrono::milliseconds>(planner_.config().interval / 4, 25ms);
  log_.info("planner: on, a round every {} ms; prefill is [process.{}], decode [process.{}]",
            period.count(), kinds_.prefill, kinds_.decode);
  thread_ = std::thread([this, period] {
    std::unique_lock lock(stop_mutex_);
    while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
      lock.unlock();
      try {
        round(clock::now());
      } catch (const std::exception& e) {
        warn_once(std::string("round failed: ") + e.what());
      }
      lock.lock();
    }
  });
}

void planner_runner::stop() {
  {
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void planner_runner::warn_once(const std::string& what) {
  if (what == last_warning_) return;
  last_warning_ = what;
  log_.warn("planner: {}", what);
}

void planner_runner::round(clock::time_point now) {
  std::optional<std::string> answer;
  try {
    answer = hooks_.ask_supervisor(json{{"request", "status"}}.dump(), status_timeout);
  } catch (const std::exception& e) {
    return warn_once(std::string("the supervisor's status did not come: ") + e.what());
  }
  const json status = answer ? json::parse(*answer, nullptr, false) : json();
  if (!status.is_object() || !status.value("ok", false))
    return warn_once("no supervisor answers on this host: the planner waits for one");
  last_warning_.clear();

  const auto p90 = hooks_.latencies(now - planner_.config().interval);
  const auto stats = hooks_.stats();
  const auto sample =
      planner::make_sample(now, status, kinds_, {p90.ttft_ms, p90.tpot_ms}, stats.get(),
                           batch_cap_.load(), limits_.decode_max_batch);
  std::optional<planner::planner_decision> decision;
  {
    std::lock_guard lock(mutex_);
    planner_.observe(sample);
    // A scale request still waiting is a change in progress, whatever the status shows yet.
    if (!scale_->waiting) decision = planner_.decide(now);
  }
  if (decision) apply(*decision, sample);
  // Every round: a decode instance started or restarted since gets the cap too.
  if (const int64_t cap = batch_cap_.load(); cap > 0) hooks_.send_batch_cap(cap);
}

void planner_runner::apply(const planner::planner_decision& d,
                           const planner::planner_sample& from) {
  log_.info("planner: {}: {}", d.action, d.reason);
  if (d.decode_batch_cap) batch_cap_ = *d.decode_batch_cap;
  if (!planner::changes_counts(d, from)) return;
  const std::string id = operation_prefix_ + std::to_string(++operations_);
  const auto request = planner::scale_request_for(d, kinds_, id, drain_timeout).dump();
  scale_->waiting = true;
  // The supervisor answers once the new slots serve and the drained ones are gone: minutes at
  // worst, so the request waits on a thread of its own, which holds nothing of the gateway.
  std::thread([state = scale_, ask = hooks_.ask_supervisor, log = log_, id, request] {
    std::string outcome;
    try {
      const auto answer = ask(request, drain_timeout + 240s);
      const json reply = answer ? json::parse(*answer, nullptr, false) : json();
      if (reply.is_object() && reply.value("ok", false))
        log.info("planner: {} done in {:.2f} s: {}", id, reply.value("took_s", 0.0),
                 changes_text(reply));
      else
        log.warn("planner: {} refused: {}", id,
                 reply.is_object() ? reply.value("error", std::string("no reason given"))
                                   : std::string("no supervisor answered"));
    } catch (const std::exception& e) {
      log.warn("planner: {} failed: {}", id, e.what());
    }
    state->waiting = false;
  }).detach();
}

std::string planner_runner::render_metrics() const {
  std::lock_guard lock(mutex_);
  return planner::render_planner_metrics(planner_);
}

} // namespace supernode::services::gateway
