#include "services/cluster/event_log.hpp"

#include "services/cluster/process_launcher.hpp"
#include "transport/private_files.hpp"

#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace supernode::services::cluster {

namespace {

nlohmann::json entry(const char* event, const std::string& process, pid_t pid) {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return {{"t", std::chrono::duration<double>(since_epoch).count()},
          {"event", event},
          {"process", process},
          {"pid", pid}};
}

void add_status(nlohmann::json& e, const exit_status& status) {
  if (status.signal() != 0) {
    e["signal"] = signal_name(status.signal());
    e["signal_number"] = status.signal();
  } else {
    e["code"] = status.code(); // -1: reaped elsewhere, the status is lost
  }
}

} // namespace

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "SIG" + std::to_string(sig);
}

event_log::event_log(const std::filesystem::path& file)
    : fd_(transport::open_private_file(file, O_APPEND)) {}

event_log::~event_log() {
  ::close(fd_);
}

namespace {

void append(int fd, const nlohmann::json& e) {
  const std::string line = e.dump() + "\n";
  [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());
}

} // namespace

void event_log::spawned(const std::string& process, pid_t pid) {
  append(fd_, entry("spawned", process, pid));
}

void event_log::ready(const std::string& process, pid_t pid) {
  append(fd_, entry("ready", process, pid));
}

void event_log::exited(const std::string& process, pid_t pid, const exit_status& status) {
  auto e = entry("exited", process, pid);
  add_status(e, status);
  append(fd_, e);
}

void event_log::stopped(const std::string& process, pid_t pid,
                        const std::optional<exit_status>& status, const std::string& reason) {
  auto e = entry("stopped", process, pid);
  if (status) add_status(e, *status);
  if (!reason.empty()) e["reason"] = reason;
  append(fd_, e);
}

void event_log::restarting(const std::string& process, pid_t pid, int attempt,
                           long long backoff_ms) {
  auto e = entry("restarting", process, pid);
  e["attempt"] = attempt;
  e["backoff_ms"] = backoff_ms;
  append(fd_, e);
}

void event_log::gave_up(const std::string& process, pid_t pid, const std::string& reason) {
  auto e = entry("gave_up", process, pid);
  e["reason"] = reason;
  append(fd_, e);
}

void event_log::draining(const std::string& process, pid_t pid) {
  append(fd_, entry("draining", process, pid));
}

void event_log::switching(const std::string& process, pid_t pid, const std::string& to) {
  auto e = entry("switching", process, pid);
  e["to"] = to;
  append(fd_, e);
}

void event_log::hung(const std::string& process, pid_t pid, long long silent_ms) {
  auto e = entry("hung", process, pid);
  e["silent_ms"] = silent_ms;
  append(fd_, e);
}

void event_log::owner_gone(pid_t owner) {
  append(fd_, entry("owner_gone", "supervisor", owner));
}

} // namespace supernode::services::cluster
