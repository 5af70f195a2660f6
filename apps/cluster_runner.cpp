#include "apps/cluster_runner.hpp"

#include "log/log.hpp"
#include "services/cluster/control_socket.hpp"
#include "services/cluster/join_policy.hpp"
#include "services/cluster/role_launch.hpp"
#include "services/cluster/supervisor.hpp"
#include "transport/private_files.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <string>
#include <sys/syscall.h>
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

process_slot slot_of(const fs::path& run_dir, const std::string& process, int index) {
  process_slot s{process, index, {}, {}};
  s.log = run_dir / "logs" / (s.name() + ".log");
  s.pid_file = run_dir / "pids" / (s.name() + ".pid");
  return s;
}

std::vector<process_slot> slots_of(const serving_setup& setup) {
  std::vector<process_slot> out;
  for (auto& p : setup.cluster.processes)
    for (int i = 0; i < p.count; ++i) out.push_back(slot_of(setup.cluster.run_dir, p.name, i));
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

// The supervisor's answer to `request`, or nothing when none runs for this cluster.
std::optional<nlohmann::json> ask_supervisor(const serving_setup& setup,
                                             const nlohmann::json& request,
                                             std::chrono::milliseconds timeout) {
  const auto answer =
      cl::ask_control(setup.cluster.run_dir / "supervisor.sock", request.dump(), timeout);
  if (!answer) return std::nullopt;
  return nlohmann::json::parse(*answer);
}

// Until `pid` (not necessarily our child) has exited, at most `timeout`; whether it has.
bool wait_for_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return errno == ESRCH;
  pollfd p{pidfd, POLLIN, 0};
  int ready;
  while ((ready = ::poll(&p, 1, static_cast<int>(timeout.count()))) < 0 && errno == EINTR) {}
  ::close(pidfd);
  return ready > 0;
}

// [process.X] liveness_timeout_ms, or by default three liveness bounds and at least 5 s: peers
// declare the process down after one and fence it, so its work is recovered before it is
// killed, and a tick late on a starved host is not taken for a hang.
std::chrono::milliseconds liveness_timeout_of(const transport::cluster_config& cluster,
                                              const transport::process_config& process) {
  if (process.liveness_timeout.count() >= 0) return process.liveness_timeout;
  return std::max<std::chrono::milliseconds>(3 * cluster.liveness_bound(), std::chrono::seconds(5));
}

cl::supervised_process supervised_slot(const serving_setup& setup, const process_slot& s,
                                       const std::string& config, const std::string& model,
                                       const std::string& join) {
  const auto& process =
      *std::find_if(setup.cluster.processes.begin(), setup.cluster.processes.end(),
                    [&](auto& p) { return p.name == s.process; });
  // A session each, as before the supervisor: the kernel's autogroup scheduling shares CPU
  // per session, and roles in one session were measured to start ~0.5 s slower on a busy host.
  return {s.name(), cl::role_spec({s.process, s.index, config, model, s.log, true, join}),
          cl::restart_rules::of(process), liveness_timeout_of(setup.cluster, process),
          setup.cluster.run_dir / "alive" / s.name()};
}

std::vector<cl::supervised_process>
supervised_slots(const serving_setup& setup, const std::string& config, const std::string& model) {
  std::vector<cl::supervised_process> out;
  for (auto& s : slots_of(setup)) out.push_back(supervised_slot(setup, s, config, model, ""));
  return out;
}

} // namespace

int cluster_supervise(const serving_setup& setup, const fs::path& config_file,
                      const fs::path& model, pid_t owner_pid) {
  // `cluster up` reads how the start went from our stdout (a pipe); after that line the pipe
  // may be gone, so stdout joins stderr in supervisor.log. A write to it after `up` died fails
  // with EPIPE: SIGPIPE is blocked (not ignored, which the roles would inherit; the launcher
  // clears the mask of every child).
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  ::sigprocmask(SIG_BLOCK, &pipe_signal, nullptr);
  cl::supervisor_options options;
  options.run_dir = setup.cluster.run_dir;
  options.cluster = setup.cluster.name;
  options.stop_on_signals = true;
  options.owner_pid = owner_pid;
  options.on_start = [](const std::optional<cl::start_failure>& failure) {
    if (failure)
      std::printf("failed %s\n", failure->name.c_str());
    else
      std::printf("up\n");
    std::fflush(stdout);
    ::dup2(STDERR_FILENO, STDOUT_FILENO);
  };
  const auto config = fs::absolute(config_file).string(), model_dir = fs::absolute(model).string();
  for (auto& p : setup.cluster.processes) {
    options.joins[p.name] = cl::join_refusal(setup.cluster, setup.serving.decode_ranks,
                                             setup.serving.prefill_ranks, p.name);
    options.join_groups[p.name] = cl::join_group_ranks(setup.cluster, setup.serving.decode_ranks,
                                                       setup.serving.prefill_ranks, p.name);
    const auto& role = p.roles.front();
    if (cl::switch_refusal(setup.cluster, setup.serving.decode_ranks, setup.serving.prefill_ranks,
                           p.name, role == "prefill" ? "decode" : "prefill")
            .empty())
      options.switchable[p.name] = role;
  }
  options.make_joined_slot = [&setup, config, model_dir](const std::string& slot) {
    const auto kind = cl::process_kind_of(slot);
    const auto s = slot_of(setup.cluster.run_dir, kind, std::stoi(slot.substr(kind.size() + 1)));
    return supervised_slot(setup, s, config, model_dir, cl::default_join_seeds(setup.cluster));
  };
  cl::supervisor supervisor(options, supervised_slots(setup, config, model_dir));
  return supervisor.run();
}

int cluster_up(const serving_setup& setup, const fs::path& config_file, pid_t owner_pid) {
  const auto slots = slots_of(setup);
  if (ask_supervisor(setup, {{"request", "status"}}, std::chrono::seconds(10)))
    throw std::runtime_error("cluster " + setup.cluster.name +
                             " already has a supervisor: run `supernode cluster down --config " +
                             setup.source + "` first");
  for (auto& s : slots)
    if (pid_t pid = running_pid(s))
      throw std::runtime_error(s.name() + " is already running (pid " + std::to_string(pid) +
                               "): run `supernode cluster down --config " + setup.source +
                               "` first");
  const auto& run = setup.cluster.run_dir;
  transport::ensure_private_dir(run / "logs");
  transport::ensure_private_dir(run / "pids");
  const auto config = fs::absolute(config_file).string();
  const auto model = fs::absolute(setup.serving.model_path).string();
  for (auto& s : slots) fs::remove(s.log);

  // The supervisor owns the processes and outlives us (a session of its own); it says on its
  // stdout when every process is ready or which one failed.
  auto spec = cl::self_command({"cluster", "supervise", "--config", config, "--model", model});
  if (owner_pid != 0) {
    spec.argv.push_back("--owner-pid");
    spec.argv.push_back(std::to_string(owner_pid));
  }
  spec.stdout_to = cl::output_to::pipe;
  spec.stderr_to = cl::output_to::file;
  spec.log_file = run / "logs" / "supervisor.log";
  spec.stdin_null = true;
  spec.new_session = true;
  auto supervisor = cl::child_process::launch(spec);
  // The supervisor's own start-up deadline is 180 s; this one only catches a supervisor that hangs.
  const auto line = supervisor.read_line(std::chrono::seconds(200));
  if (line && *line == "up") {
    supervisor.release();
    std::printf("cluster %s up: %zu processes, logs in %s\n", setup.cluster.name.c_str(),
                slots.size(), (run / "logs").c_str());
    for (auto& s : slots)
      for (const auto& listening : cl::lines_starting(cl::read_text_file(s.log), "listening "))
        std::printf("%s\n", listening.c_str());
    return 0;
  }
  if (line && line->rfind("failed ", 0) == 0) {
    const auto name = line->substr(7);
    const auto log = run / "logs" / (name + ".log");
    // It stops every process itself; we wait for that, then say why.
    supervisor.wait_for(std::chrono::seconds(60));
    const auto events = cl::read_text_file(run / "events.jsonl");
    const bool exited = events.find("\"exited during start-up\"") != std::string::npos;
    const cl::start_failure failure{name, exited, log, cl::last_lines(cl::read_text_file(log), 15)};
    log::process().error("cluster: {}", failure.describe());
    return 1;
  }
  log::process().error("cluster: the supervisor {}; its log ({}) ends with:\n{}",
                       line ? "said '" + *line + "'" : "ended or hung during start-up",
                       spec.log_file.string(),
                       cl::last_lines(cl::read_text_file(spec.log_file), 15));
  supervisor.kill();
  cluster_down(setup, std::chrono::seconds(5));
  return 1;
}

int cluster_status(const serving_setup& setup, bool json) {
  if (auto answer = ask_supervisor(setup, {{"request", "status"}}, std::chrono::seconds(10))) {
    int code = 0;
    if (json) {
      std::printf("%s\n", answer->dump().c_str());
      for (auto& p : (*answer)["processes"])
        if (p["phase"] != "serving") code = 1;
      return code;
    }
    for (auto& p : (*answer)["processes"]) {
      const auto state = p["state"].get<std::string>();
      std::string last;
      if (const auto& e = p["last_exit"]; e.is_object())
        last = e.contains("signal") ? "  last exit " + e["signal"].get<std::string>()
                                    : "  last exit code " + std::to_string(e["code"].get<int>());
      std::string serves;
      for (auto& name : p["instances"]) {
        if (!serves.empty()) serves += ',';
        serves += name.get<std::string>();
      }
      std::printf("%-24s %-10s pid %d  restarts %d%s  serves %s  log %s\n",
                  p["process"].get<std::string>().c_str(),
                  state == "running" ? p["phase"].get<std::string>().c_str() : state.c_str(),
                  p["pid"].get<int>(), p["restarts"].get<int>(), last.c_str(),
                  serves.empty() ? "-" : serves.c_str(), p["log"].get<std::string>().c_str());
      if (state != "running" || !p["ready"].get<bool>()) code = 1;
    }
    return code;
  }
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

int cluster_scale(const serving_setup& setup, const scale_options& options) {
  nlohmann::json request{
      {"request", "scale"},
      {"counts", options.counts},
      {"drain_timeout_ms",
       std::chrono::duration_cast<std::chrono::milliseconds>(options.drain_timeout).count()}};
  if (!options.drain.empty()) request["drain"] = options.drain;
  if (!options.operation_id.empty()) request["operation_id"] = options.operation_id;
  if (options.switch_roles) request["switch"] = true;
  // Started slots load the model; a drain may take its whole timeout.
  const auto answer =
      ask_supervisor(setup, request, options.drain_timeout + std::chrono::seconds(240));
  if (!answer)
    throw std::runtime_error("cluster " + setup.cluster.name + " has no supervisor: run " +
                             "`supernode cluster up --config " + setup.source + "` first");
  const bool ok = answer->value("ok", false);
  if (options.json) {
    std::printf("%s\n", answer->dump().c_str());
  } else if (ok) {
    std::printf("cluster %s scaled in %.2f s", setup.cluster.name.c_str(),
                (*answer)["took_s"].get<double>());
    for (auto& name : (*answer)["started"])
      std::printf("; started %s", name.get<std::string>().c_str());
    for (auto& name : (*answer)["stopped"])
      std::printf("; stopped %s", name.get<std::string>().c_str());
    for (auto& name : (*answer)["switched"])
      std::printf("; switched %s", name.get<std::string>().c_str());
    std::printf("\n");
  } else {
    log::process().error("cluster scale: {}", answer->value("error", std::string("refused")));
  }
  return ok ? 0 : 1;
}

int cluster_down(const serving_setup& setup, std::chrono::seconds grace) {
  const auto supervisor_pid_file = setup.cluster.run_dir / "pids" / "supervisor.pid";
  pid_t supervisor = 0;
  std::ifstream(supervisor_pid_file) >> supervisor;
  try {
    const nlohmann::json request{
        {"request", "down"},
        {"grace_ms", std::chrono::duration_cast<std::chrono::milliseconds>(grace).count()}};
    if (auto answer = ask_supervisor(setup, request, grace + std::chrono::seconds(30))) {
      // Answered once every process is gone; the supervisor itself ends right after.
      if (supervisor > 0) wait_for_exit(supervisor, std::chrono::seconds(10));
      const auto killed = (*answer)["killed"].get<size_t>();
      std::printf("cluster %s down: %zu processes stopped%s\n", setup.cluster.name.c_str(),
                  (*answer)["stopped"].get<size_t>(),
                  killed ? " (some killed after the grace period)" : "");
      return 0;
    }
  } catch (const std::exception& e) {
    // A supervisor that hangs is ended here, and its processes are found by their pid files.
    log::process().error("cluster: {}; stopping the processes by their pid files", e.what());
    if (supervisor > 0) ::kill(supervisor, SIGKILL);
  }
  std::vector<std::pair<process_slot, pid_t>> alive;
  for (auto& s : slots_of(setup))
    if (pid_t pid = running_pid(s)) {
      ::kill(pid, SIGINT); // the whole cluster goes: no drain, as the supervisor's `down`
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
  fs::remove(supervisor_pid_file);
  std::printf("cluster %s down: %zu processes stopped%s\n", setup.cluster.name.c_str(),
              alive.size(), killed ? " (some killed after the grace period)" : "");
  return 0;
}

} // namespace supernode::apps
