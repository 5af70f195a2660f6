#include "transport/fault_injection.hpp"

#include "transport/checksum.hpp"
#include "transport/cluster_config.hpp"
#include "transport/config_document.hpp"

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace supernode::transport {

namespace {

// splitmix64: small, fully specified, so a seed gives the same draws everywhere.
uint64_t next_u64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double next_unit(uint64_t& state) {
  return static_cast<double>(next_u64(state) >> 11) * 0x1.0p-53;
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr std::array<const char*, plane_fault_kind_count> kind_names{"drop", "duplicate", "corrupt",
                                                                     "delay"};
constexpr std::array<const char*, 2> storage_kind_names{"disk_full", "slow_store"};

const std::vector<config_key>& run_keys() {
  static const std::vector<config_key> keys = [] {
    std::vector<config_key> k{
        {"epoch_s", config_type::floating, "unix seconds every fault's at_s counts from"},
        {"seed", config_type::integer, "seed of the frames' draws"},
    };
    k[1].min = 0;
    return k;
  }();
  return keys;
}

const std::vector<config_key>& fault_keys() {
  static const std::vector<config_key> keys = [] {
    std::vector<config_key> k{
        {"kind", config_type::string, "what happens to a frame"},
        {"flow", config_type::string, "the flow whose frames it takes"},
        {"process", config_type::string, "only in this process slot"},
        {"at_s", config_type::floating, "start, seconds after epoch_s"},
        {"duration_s", config_type::floating, "length of the window"},
        {"rate", config_type::floating, "fraction of the frames taken"},
        {"delay_ms", config_type::integer, "delay: how much later"},
    };
    k[0].choices.assign(kind_names.begin(), kind_names.end());
    k[0].required = k[1].required = k[3].required = k[4].required = true;
    k[3].low = k[4].low = 0;
    k[5].low = 0, k[5].high = 1;
    k[6].min = 0;
    return k;
  }();
  return keys;
}

const std::vector<config_key>& storage_fault_keys() {
  static const std::vector<config_key> keys = [] {
    std::vector<config_key> k{
        {"kind", config_type::string, "what the storage does"},
        {"process", config_type::string, "only in this process slot"},
        {"at_s", config_type::floating, "start, seconds after epoch_s"},
        {"duration_s", config_type::floating, "length of the window"},
        {"delay_ms", config_type::integer, "slow_store: added to every read"},
    };
    k[0].choices.assign(storage_kind_names.begin(), storage_kind_names.end());
    k[0].required = k[2].required = k[3].required = true;
    k[2].low = k[3].low = 0;
    k[4].min = 0;
    return k;
  }();
  return keys;
}

std::mutex slot_mutex;
std::string slot_of_process; // under slot_mutex

std::string float_text(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  auto s = out.str();
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0"; // TOML floats need a point
  return s;
}

std::string quoted(const std::string& s) {
  return toml_text(config_value(s));
}

} // namespace

const char* to_string(plane_fault_kind k) {
  return kind_names[static_cast<size_t>(k)];
}

std::optional<plane_fault_kind> plane_fault_kind_named(std::string_view name) {
  for (size_t i = 0; i < kind_names.size(); ++i)
    if (name == kind_names[i]) return static_cast<plane_fault_kind>(i);
  return std::nullopt;
}

const char* to_string(storage_fault_kind k) {
  return storage_kind_names[static_cast<size_t>(k)];
}

std::optional<storage_fault_kind> storage_fault_kind_named(std::string_view name) {
  for (size_t i = 0; i < storage_kind_names.size(); ++i)
    if (name == storage_kind_names[i]) return static_cast<storage_fault_kind>(i);
  return std::nullopt;
}

std::optional<double> fault_epoch::since(double now, bool* started) {
  if (!epoch_ && !file_.empty() && now >= next_check_) {
    next_check_ = now + 0.05;
    std::ifstream in(file_);
    if (double epoch = 0; in >> epoch) {
      epoch_ = epoch;
      if (started) *started = true;
    }
  }
  if (!epoch_) return std::nullopt;
  return now - *epoch_;
}

const plane_fault_plan* process_fault_plan() {
  static const std::optional<plane_fault_plan> plan = []() -> std::optional<plane_fault_plan> {
    const char* file = std::getenv(fault_plan_env);
    if (!file || !*file) return std::nullopt;
    return parse_plane_fault_plan(read_config_file(file), file);
  }();
  return plan ? &*plan : nullptr;
}

std::string process_fault_epoch_file() {
  const char* file = std::getenv(fault_plan_env);
  return file && *file ? std::string(file) + ".epoch" : std::string();
}

std::string process_fault_slot() {
  std::lock_guard lock(slot_mutex);
  return slot_of_process;
}

std::string plane_fault_plan_text(const plane_fault_plan& plan) {
  std::ostringstream out;
  out << "[run]\n";
  if (plan.epoch_s) out << "epoch_s = " << float_text(*plan.epoch_s) << "\n";
  out << "seed = " << plan.seed << "\n";
  for (const auto& f : plan.faults) {
    out << "\n[[fault]]\nkind = \"" << to_string(f.kind) << "\"\nflow = " << quoted(f.flow) << "\n";
    if (!f.process.empty()) out << "process = " << quoted(f.process) << "\n";
    out << "at_s = " << float_text(f.at_s) << "\nduration_s = " << float_text(f.duration_s)
        << "\nrate = " << float_text(f.rate) << "\ndelay_ms = " << f.delay_ms << "\n";
  }
  for (const auto& f : plan.storage) {
    out << "\n[[storage_fault]]\nkind = \"" << to_string(f.kind) << "\"\n";
    if (!f.process.empty()) out << "process = " << quoted(f.process) << "\n";
    out << "at_s = " << float_text(f.at_s) << "\nduration_s = " << float_text(f.duration_s)
        << "\ndelay_ms = " << f.delay_ms << "\n";
  }
  return out.str();
}

plane_fault_plan parse_plane_fault_plan(std::string_view text, const std::string& source) {
  const config_document doc(text, source);
  const std::vector<std::string> tables{"run", "fault", "storage_fault"};
  doc.check_tables(tables);
  plane_fault_plan plan;
  doc.read_table({"run"}, run_keys(), {}, [&](size_t i, config_value v) {
    if (i == 0) plan.epoch_s = std::get<double>(v);
    if (i == 1) plan.seed = static_cast<uint64_t>(std::get<int64_t>(v));
  });
  const size_t n = doc.table_count({"fault"});
  for (size_t index = 0; index < n; ++index) {
    plane_fault f;
    doc.read_table({"fault", std::to_string(index)}, fault_keys(), {},
                   [&](size_t i, config_value v) {
                     switch (i) {
                     case 0:
                       f.kind = *plane_fault_kind_named(std::get<std::string>(v));
                       break;
                     case 1:
                       f.flow = std::get<std::string>(v);
                       break;
                     case 2:
                       f.process = std::get<std::string>(v);
                       break;
                     case 3:
                       f.at_s = std::get<double>(v);
                       break;
                     case 4:
                       f.duration_s = std::get<double>(v);
                       break;
                     case 5:
                       f.rate = std::get<double>(v);
                       break;
                     default:
                       f.delay_ms = std::get<int64_t>(v);
                     }
                   });
    plan.faults.push_back(std::move(f));
  }
  const size_t storage = doc.table_count({"storage_fault"});
  for (size_t index = 0; index < storage; ++index) {
    storage_fault f;
    doc.read_table({"storage_fault", std::to_string(index)}, storage_fault_keys(), {},
                   [&](size_t i, config_value v) {
                     if (i == 0) f.kind = *storage_fault_kind_named(std::get<std::string>(v));
                     if (i == 1) f.process = std::get<std::string>(v);
                     if (i == 2) f.at_s = std::get<double>(v);
                     if (i == 3) f.duration_s = std::get<double>(v);
                     if (i == 4) f.delay_ms = std::get<int64_t>(v);
                   });
    plan.storage.push_back(std::move(f));
  }
  return plan;
}

fault_injector::fault_injector(plane_fault_plan plan, const std::string& process_slot,
                               log::logger logger, std::string epoch_file, clock_function now)
    : plan_(std::move(plan)), log_(std::move(logger)), now_(now ? std::move(now) : unix_now),
      epoch_(plan_.epoch_s, std::move(epoch_file)) {
  const uint64_t process_seed = fnv1a(process_slot.data(), process_slot.size());
  for (size_t i = 0; i < plan_.faults.size(); ++i) {
    const auto& f = plan_.faults[i];
    if (!f.process.empty() && f.process != process_slot) continue;
    window_state w;
    w.fault = f;
    w.rng = plan_.seed ^ process_seed ^ (0x9e3779b97f4a7c15ull * (i + 1));
    windows_.push_back(std::move(w));
  }
  corrupt_rng_ = plan_.seed ^ process_seed;
  timer_ = std::thread([this] { run_timer(); });
}

fault_injector::~fault_injector() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  timer_wake_.notify_all();
  timer_.join();
  note_closed_windows(std::numeric_limits<double>::infinity());
}

std::unique_ptr<fault_injector> fault_injector::from_environment(const instance_config& self,
                                                                 const log::logger& logger) {
  const plane_fault_plan* plan = process_fault_plan();
  if (!plan) return nullptr;
  const std::string slot = self.process + "-" + std::to_string(self.index);
  {
    std::lock_guard lock(slot_mutex);
    if (slot_of_process.empty()) slot_of_process = slot; // storage faults match on it
  }
  auto injector = std::make_unique<fault_injector>(*plan, slot, logger, process_fault_epoch_file());
  if (injector->windows_.empty()) return nullptr;
  logger.info("fault injection armed: {} plane fault(s) of {} apply to process {}",
              injector->windows_.size(), std::getenv(fault_plan_env), slot);
  return injector;
}

const plane_fault* fault_injector::pick(const std::string& flow, double now) {
  bool started = false;
  const auto since = epoch_.since(now, &started);
  if (started) log_.info("fault injection: the plan's clock started {:.3f} s ago", *since);
  if (!since) return nullptr;
  const double since_epoch = *since;
  for (auto& w : windows_) {
    const auto& f = w.fault;
    if (f.flow != flow || since_epoch < f.at_s || since_epoch >= f.at_s + f.duration_s) continue;
    ++w.seen;
    if (next_unit(w.rng) >= f.rate) continue;
    ++w.acted;
    if (!w.announced) {
      w.announced = true;
      log_.info("fault injection: {} of {:.0f}% of {} frames for {:g} s starts (faults_injected)",
                to_string(f.kind), f.rate * 100, f.flow, f.duration_s);
    }
    return &f;
  }
  return nullptr;
}

void fault_injector::note_closed_windows(double now) {
  std::lock_guard lock(mutex_);
  const auto since = epoch_.since(now);
  if (!since) return;
  const double since_epoch = *since;
  for (auto& w : windows_) {
    const auto& f = w.fault;
    if (!w.announced || w.summarised || since_epoch < f.at_s + f.duration_s) continue;
    w.summarised = true;
    log_.info("fault injection: {} on {} ended: faults_injected {} of {} frames", to_string(f.kind),
              f.flow, w.acted, w.seen);
  }
}

send_status fault_injector::send(const std::string& flow, const envelope& message,
                                 const send_function& send) {
  const double now = now_();
  std::optional<plane_fault> fault;
  {
    std::lock_guard lock(mutex_);
    if (const plane_fault* f = pick(flow, now)) fault = *f;
  }
  note_closed_windows(now);
  if (!fault) return send(message);
  injected_[static_cast<size_t>(fault->kind)].fetch_add(1);
  switch (fault->kind) {
  case plane_fault_kind::drop:
    return send_status::ok;
  case plane_fault_kind::duplicate: {
    const auto first = send(message);
    if (first != send_status::ok) return first;
    send(message); // the copy's fate is the network's, not the sender's
    return first;
  }
  case plane_fault_kind::corrupt:
    return corrupt(message, send);
  case plane_fault_kind::delay: {
    const auto due = std::chrono::steady_clock::now() + std::chrono::milliseconds(fault->delay_ms);
    {
      std::lock_guard lock(mutex_);
      delayed_.emplace(due, delayed_send{message, send});
    }
    timer_wake_.notify_all();
    return send_status::ok;
  }
  }
  return send(message);
}

send_status fault_injector::corrupt(const envelope& message, const send_function& send) {
  byte_buffer frame = message.encode();
  const size_t payload = frame.size > frame_header_bytes ? frame.size - frame_header_bytes : 0;
  size_t at = 0;
  {
    std::lock_guard lock(mutex_);
    at = payload > 0 ? frame_header_bytes + next_u64(corrupt_rng_) % payload
                     : next_u64(corrupt_rng_) % frame.size;
  }
  frame.data.get()[at] = static_cast<char>(~frame.data.get()[at]);
  frame_error_counters refused;
  std::string reason;
  auto received = decode_frame(frame.bytes(), refused, &reason);
  if (!received) {
    corrupt_refused_.fetch_add(1);
    log_.debug("fault injection: corrupted frame refused by the frame checks: {}", reason);
    return send_status::ok;
  }
  return send(*received);
}

void fault_injector::run_timer() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (delayed_.empty()) {
      timer_wake_.wait(lock);
      continue;
    }
    const auto due = delayed_.begin()->first;
    if (std::chrono::steady_clock::now() < due) {
      timer_wake_.wait_until(lock, due);
      continue;
    }
    auto item = std::move(delayed_.begin()->second);
    delayed_.erase(delayed_.begin());
    lock.unlock();
    item.send(item.message); // a delayed frame finds what the plane says then; nobody waits
    lock.lock();
  }
  // Frames still waiting are lost with the endpoint, like frames in flight on a dying link.
}

} // namespace supernode::transport
