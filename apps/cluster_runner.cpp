#include "apps/cluster_runner.hpp"

#include "log/log.hpp"
#include "services/cluster/role_launch.hpp"
#include "transport/private_files.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace supernode::apps {

namespace {

namespace fs = std::filesystem;
namespace cl = services::cluster;
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

// The pid in the slot's pid file, if that process is alive and is one of ours (pids recycle).
pid_t running_pid(const process_slot& s) {
  std::ifstream in(s.pid_file);
  pid_t pid = 0;
  if (!(in >> pid) || pid <= 0 || ::kill(pid, 0) != 0) return 0;
  const auto cmdline = cl::read_text_file("/proc/" + std::to_string(pid) + "/cmdline");
  if (cmdline.find("role") == std::string::npos) return 0;
  const auto stat = cl::read_text_file("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') return 0;
  return pid;
}

} // namespace

int cluster_up(const serving_setup& setup, const fs::path& config_file) {
  const auto slots = slots_of(setup);
  for (auto& s : slots)
    if (pid_t pid = running_pid(s))
      throw std::runtime_error(s.name() + " is already running (pid " + std::to_string(pid) +
                               "): run `supernode cluster down --config " + setup.source +
                               "` first");
  transport::ensure_private_dir(setup.cluster.run_dir / "logs");
  transport::ensure_private_dir(setup.cluster.run_dir / "pids");
  const auto config = fs::absolute(config_file).string();
  const auto model = fs::absolute(setup.serving.model_path).string();

  // A log of an earlier run holds its "ready" line: gone before anything is spawned, or the wait
  // below could read it before the new process truncates its log.
  for (auto& s : slots) fs::remove(s.log);
  std::vector<cl::child_process> children;
  std::vector<cl::starting_process> starting;
  children.reserve(slots.size());
  for (auto& s : slots) {
    children.push_back(cl::launch_role({s.process, s.index, config, model, s.log, true}));
    transport::write_private_file(s.pid_file, std::to_string(children.back().pid()) + "\n");
  }
  for (size_t i = 0; i < slots.size(); ++i)
    starting.push_back({slots[i].name(), &children[i], slots[i].log});
  // Every process prints "ready"; one that exits first failed to start.
  const auto failure = cl::wait_until_ready(starting, std::chrono::seconds(180));
  // The processes outlive this command: `cluster down` finds them by their pid files.
  for (auto& c : children) c.release();
  if (failure) {
    log::process().error("cluster: {}", failure->describe());
    cluster_down(setup, std::chrono::seconds(5));
    return 1;
  }
  std::printf("cluster %s up: %zu processes, logs in %s\n", setup.cluster.name.c_str(),
              slots.size(), (setup.cluster.run_dir / "logs").c_str());
  for (auto& s : slots)
    for (const auto& line : cl::lines_starting(cl::read_text_file(s.log), "listening "))
      std::printf("%s\n", line.c_str());
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
