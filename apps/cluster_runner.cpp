#include "apps/cluster_runner.hpp"

#include "log/log.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace supernode::apps {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

struct process_slot {
  std::string process;
  int index = 0;
  fs::path log, pid_file;
  std::string name() const { return process + "-" + std::to_string(index); }
};

std::vector<process_slot> slots_of(const serving_setup& setup) {
  const auto& run = setup.cluster.run_dir;
  std::vector<process_slot> out;
  for (auto& p : setup.cluster.processes)
    for (int i = 0; i < p.count; ++i) {
      process_slot s{p.name, i, {}, {}};
      s.log = run / "logs" / (s.name() + ".log");
      s.pid_file = run / "pids" / (s.name() + ".pid");
      out.push_back(s);
    }
  return out;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The pid in the slot's pid file, if that process is alive and is one of ours (pids recycle).
pid_t running_pid(const process_slot& s) {
  std::ifstream in(s.pid_file);
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0 || ::kill(pid, 0) != 0) return 0;
  const auto cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
  if (cmdline.find("role") == std::string::npos) return 0;
  const auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') return 0;
  return pid;
}

std::string tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  for (size_t n = 0; n <= lines && pos > 0; ++n) pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos ? text : text.substr(pos + 1);
}

pid_t spawn(const process_slot& s, const std::vector<std::string>& argv) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::setsid(); // survives the terminal that ran `cluster up`
    const int fd = ::open(s.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, STDIN_FILENO);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv("/proc/self/exe", args.data());
    std::perror("supernode cluster: exec failed");
    ::_exit(127);
  }
  return pid;
}

// One line per line of the process's log tail, so each still names who said it.
void report_failed_start(const process_slot& s, bool exited, const std::string& log_text) {
  const auto& log = log::process();
  log.error("cluster: {} {}; its log ({}) ends with:", s.name(),
            exited ? "exited during start-up" : "did not start in time", s.log.string());
  std::istringstream lines(tail(log_text, 15));
  for (std::string line; std::getline(lines, line);) log.error("  {}: {}", s.name(), line);
}

} // namespace

int cluster_up(const serving_setup& setup, const fs::path& config_file) {
  const auto slots = slots_of(setup);
  for (auto& s : slots)
    if (pid_t pid = running_pid(s))
      throw std::runtime_error(s.name() + " is already running (pid " + std::to_string(pid) +
                               "): run `supernode cluster down --config " + setup.source +
                               "` first");
  fs::create_directories(setup.cluster.run_dir / "logs");
  fs::create_directories(setup.cluster.run_dir / "pids");
  const auto config = fs::absolute(config_file).string();
  const auto model = fs::absolute(setup.serving.model_path).string();

  // A log of an earlier run holds its "ready" line: gone before anything is spawned, or the wait
  // below could read it before the new process truncates its log.
  for (auto& s : slots) fs::remove(s.log);
  std::vector<pid_t> pids;
  for (auto& s : slots) {
    const pid_t pid = spawn(s, {"supernode", "role", s.process, "--config", config, "--id",
                                std::to_string(s.index), "--model", model});
    pids.push_back(pid);
    std::ofstream(s.pid_file) << pid << "\n";
  }
  // Wait for every "ready" line; a process that exits first failed to start.
  const auto deadline = clock_type::now() + std::chrono::seconds(180);
  std::vector<bool> ready(slots.size(), false);
  for (size_t left = slots.size(); left > 0;) {
    for (size_t i = 0; i < slots.size(); ++i) {
      if (ready[i]) continue;
      const auto log = read_file(slots[i].log);
      int status = 0;
      const bool exited = ::waitpid(pids[i], &status, WNOHANG) == pids[i];
      if (log.find("\nready") != std::string::npos || log.rfind("ready", 0) == 0) {
        ready[i] = true;
        --left;
      } else if (exited || clock_type::now() > deadline) {
        report_failed_start(slots[i], exited, log);
        cluster_down(setup, std::chrono::seconds(5));
        return 1;
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("cluster %s up: %zu processes, logs in %s\n", setup.cluster.name.c_str(),
              slots.size(), (setup.cluster.run_dir / "logs").c_str());
  for (auto& s : slots) {
    std::istringstream log(read_file(s.log));
    for (std::string line; std::getline(log, line);)
      if (line.rfind("listening ", 0) == 0) std::printf("%s\n", line.c_str());
  }
  return 0;
}

int cluster_status(const serving_setup& setup) {
  int code = 0;
  for (auto& s : slots_of(setup)) {
    if (pid_t pid = running_pid(s)) {
      std::printf("%-24s running  pid %d  log %s\n", s.name().c_str(), pid, s.log.c_str());
    } else {
      std::printf("%-24s stopped\n", s.name().c_str());
      code = 1;
    }
  }
  return code;
}

int cluster_down(const serving_setup& setup, std::chrono::seconds grace) {
  std::vector<std::pair<process_slot, pid_t>> alive;
  for (auto& s : slots_of(setup))
    if (pid_t pid = running_pid(s)) {
      ::kill(pid, SIGTERM);
      alive.emplace_back(s, pid);
    }
  const auto deadline = clock_type::now() + grace;
  size_t killed = 0;
  for (auto& [s, pid] : alive) {
    while (running_pid(s) == pid && clock_type::now() < deadline) {
      ::waitpid(pid, nullptr, WNOHANG); // our child when `up` failed; reaped by init otherwise
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (running_pid(s) == pid) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, WNOHANG);
      ++killed;
    }
  }
  for (auto& s : slots_of(setup)) fs::remove(s.pid_file);
  std::printf("cluster %s down: %zu processes stopped%s\n", setup.cluster.name.c_str(),
              alive.size(), killed ? " (some killed after the grace period)" : "");
  return 0;
}

} // namespace supernode::apps
