#include "services/cluster/supervisor.hpp"

#include "services/cluster/control_socket.hpp"
#include "services/cluster/event_log.hpp"
#include "services/cluster/scale_plan.hpp"
#include "services/serving/drain_mode.hpp"
#include "services/serving/role_switch.hpp"
#include "transport/private_files.hpp"
#include "transport/shm_segment.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace supernode::services::cluster {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

enum class slot_state { running, restarting, gave_up, stopped };

const char* to_string(slot_state s) {
  switch (s) {
  case slot_state::running:
    return "running";
  case slot_state::restarting:
    return "restarting";
  case slot_state::gave_up:
    return "gave_up";
  case slot_state::stopped:
    break;
  }
  return "stopped";
}

struct slot {
  slot(supervised_process d) : def(std::move(d)), policy(def.rules) {}

  supervised_process def;
  restart_policy policy;
  std::optional<child_process> child;
  int pidfd = -1;
  pid_t pid = 0; // the live one, or the last one
  slot_state state = slot_state::stopped;
  bool ready = false, ever_ready = false, spawned_once = false;
  int restarts = 0;
  std::optional<exit_status> last_exit;
  clock_type::time_point restart_at;
  bool hung_killed = false; // the probe killed this run
  bool wanted = true;       // false: scaled down (drained, then left stopped)
  // The process kind it serves after a role switch ("" for its own); restarted serving it.
  std::string serves;
  // "ready" lines its log held when it was asked to switch: the next one says it serves again.
  size_t ready_lines_before = 0;
  std::vector<std::string> instances; // as its last "ready" line names them

  bool probed() const { return def.liveness_timeout.count() > 0 && !def.liveness_file.empty(); }
  bool alive() const { return child && child->running(); }
};

json status_json(const exit_status& s) {
  if (s.signal() != 0) return {{"signal", signal_name(s.signal())}, {"signal_number", s.signal()}};
  return {{"code", s.code()}};
}

struct client {
  int fd = -1;
  std::string buffer;
  bool waits_for_down = false;
  bool waits_for_scale = false;
};

// What `status` calls a slot: starting, serving, draining (scaled down, not gone yet) or down.
const char* phase_of(const slot& s) {
  if (!s.alive()) return "down";
  if (!s.wanted) return "draining";
  return s.ready ? "serving" : "starting";
}

void send_line(int fd, const json& answer) {
  const std::string line = answer.dump() + "\n";
  [[maybe_unused]] auto n = ::send(fd, line.data(), line.size(), MSG_NOSIGNAL);
}

} // namespace

struct supervisor::impl {
  supervisor_options options;
  std::deque<slot> slots; // grows by joined slots; references stay valid
  fs::path pids_dir;
  std::unique_ptr<event_log> events;
  std::unique_ptr<control_listener> listener;
  int inotify_fd = -1, signal_fd = -1, owner_fd = -1;
  std::map<int, fs::path> watched_dirs; // inotify watch descriptor -> folder
  std::vector<client> clients;

  bool starting = true; // not every slot has been ready once yet
  // The scale operation running, if any: what it changes, since when, until when its drained
  // slots may take before they are killed.
  scale_operations scales;
  std::vector<std::string> scale_start, scale_stop, scale_switched;
  clock_type::time_point scale_began, drain_deadline;
  bool drain_killed = false;
  clock_type::time_point start_deadline;
  bool stopping = false, kill_sent = false;
  clock_type::time_point kill_deadline;
  size_t stopped_count = 0, killed_count = 0;
  int exit_code = 0;

  impl(supervisor_options o, std::vector<supervised_process> processes)
      : options(std::move(o)), pids_dir(options.run_dir / "pids") {
    for (auto& p : processes) slots.emplace_back(std::move(p));
  }

  ~impl() {
    for (auto& c : clients) ::close(c.fd);
    for (auto& s : slots)
      if (s.pidfd >= 0) ::close(s.pidfd);
    if (inotify_fd >= 0) ::close(inotify_fd);
    if (signal_fd >= 0) ::close(signal_fd);
    if (owner_fd >= 0) ::close(owner_fd);
  }

  fs::path pid_file(const slot& s) const { return pids_dir / (s.def.name + ".pid"); }

  void begin() {
    transport::ensure_private_dir(options.run_dir);
    transport::ensure_private_dir(pids_dir);
    listener = std::make_unique<control_listener>(options.run_dir / "supervisor.sock");
    // One run's events per file: the previous run's stay readable as events.jsonl.1.
    const auto events_file = options.run_dir / "events.jsonl";
    std::error_code ec;
    fs::rename(events_file, events_file.string() + ".1", ec);
    events = std::make_unique<event_log>(events_file);
    transport::write_private_file(pids_dir / "supervisor.pid", std::to_string(::getpid()) + "\n");
    inotify_fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (inotify_fd < 0) throw std::runtime_error(std::string("inotify: ") + std::strerror(errno));
    std::set<fs::path> dirs;
    for (auto& s : slots) dirs.insert(s.def.spec.log_file.parent_path());
    for (auto& s : slots)
      if (s.probed()) transport::ensure_private_dir(s.def.liveness_file.parent_path());
    for (auto& dir : dirs) {
      transport::ensure_private_dir(dir);
      const int wd = ::inotify_add_watch(inotify_fd, dir.c_str(), IN_MODIFY | IN_CLOSE_WRITE);
      if (wd < 0)
        throw std::runtime_error("inotify on " + dir.string() + ": " + std::strerror(errno));
      watched_dirs[wd] = dir;
    }
    if (options.stop_on_signals) {
      sigset_t stop;
      sigemptyset(&stop);
      sigaddset(&stop, SIGTERM);
      sigaddset(&stop, SIGINT);
      ::sigprocmask(SIG_BLOCK, &stop, nullptr);
      signal_fd = ::signalfd(-1, &stop, SFD_NONBLOCK | SFD_CLOEXEC);
    }
    if (options.owner_pid > 0) {
      owner_fd = static_cast<int>(::syscall(SYS_pidfd_open, options.owner_pid, 0));
      if (owner_fd < 0 && errno != ESRCH)
        throw std::runtime_error("pidfd_open(" + std::to_string(options.owner_pid) +
                                 "), the owner: " + std::strerror(errno));
      if (owner_fd < 0) owner_gone(); // already: nothing starts
    }
    start_deadline = clock_type::now() + options.start_timeout;
    for (auto& s : slots)
      if (!stopping) spawn(s); // a slot that cannot even be executed fails the start at once
  }

  void spawn(slot& s) {
    // The previous run's log is evidence of why it ended: kept as <log>.1, not truncated away.
    std::error_code ec;
    if (s.spawned_once) fs::rename(s.def.spec.log_file, s.def.spec.log_file.string() + ".1", ec);
    s.spawned_once = true;
    s.ready = false;
    s.ready_lines_before = 0;
    s.policy.started(clock_type::now());
    s.hung_killed = false;
    auto spec = s.def.spec;
    if (!s.serves.empty()) {
      spec.argv.push_back("--as");
      spec.argv.push_back(options.switchable.at(s.serves));
    }
    if (s.probed()) spec.env.emplace_back("SUPERNODE_LIVENESS_FILE", s.def.liveness_file.string());
    try {
      s.child = child_process::launch(spec);
    } catch (const std::exception& e) {
      // Not executable: the same as a process that failed at once (the shell's 127).
      transport::write_private_file(s.def.spec.log_file, std::string(e.what()) + "\n");
      s.pid = 0;
      s.state = slot_state::running;
      events->spawned(s.def.name, 0);
      ended(s, exit_status{127 << 8, true});
      return;
    }
    s.pid = s.child->pid();
    // Our child, not yet reaped: the pid cannot name another process.
    s.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, s.pid, 0));
    if (s.pidfd < 0)
      throw std::runtime_error("pidfd_open(" + std::to_string(s.pid) +
                               "): " + std::strerror(errno));
    s.state = slot_state::running;
    transport::write_private_file(pid_file(s), std::to_string(s.pid) + "\n");
    events->spawned(s.def.name, s.pid);
    check_ready(s);
  }

  void check_ready(slot& s) {
    if (s.ready || !s.alive()) return;
    const auto ready_lines = lines_starting(read_text_file(s.def.spec.log_file), "ready");
    if (ready_lines.size() <= s.ready_lines_before) return;
    // "ready decode-2 ...": what it serves, read once here rather than at every status.
    s.instances.clear();
    std::istringstream words(ready_lines.back().substr(std::string("ready").size()));
    for (std::string name; words >> name;) s.instances.push_back(name);
    s.ready = s.ever_ready = true;
    // The probe's clock starts at ready: loading a model is not a hang.
    if (s.probed()) touch_private(s.def.liveness_file);
    events->ready(s.def.name, s.pid);
    if (starting && std::all_of(slots.begin(), slots.end(), [](auto& x) { return x.ever_ready; })) {
      starting = false;
      if (options.on_start) options.on_start(std::nullopt);
    }
  }

  void on_exit(slot& s) {
    const auto status = s.child->wait();
    ::close(std::exchange(s.pidfd, -1));
    s.child.reset();
    ended(s, status);
  }

  void ended(slot& s, const exit_status& status) {
    s.last_exit = status;
    s.ready = false;
    std::error_code ec;
    fs::remove(pid_file(s), ec);
    if (!options.cluster.empty() && s.pid > 0)
      transport::cleanup_segments_of(options.cluster, s.pid);
    if (stopping) {
      s.state = slot_state::stopped;
      events->stopped(s.def.name, s.pid, status);
      return;
    }
    if (!s.wanted) {
      s.state = slot_state::stopped;
      s.serves.clear(); // started again, it serves its own kind
      events->stopped(s.def.name, s.pid, status, "scaled down");
      return;
    }
    events->exited(s.def.name, s.pid, status);
    if (starting && !s.ever_ready) {
      fail_start(s, true);
      return;
    }
    const auto d = s.policy.exited(!status.success(), clock_type::now());
    switch (d.what) {
    case restart_decision::action::restart:
      s.state = slot_state::restarting;
      s.restart_at = d.at;
      events->restarting(s.def.name, s.pid, d.attempt, d.backoff.count());
      break;
    case restart_decision::action::give_up:
      s.state = slot_state::gave_up;
      events->gave_up(s.def.name, s.pid, d.reason);
      break;
    case restart_decision::action::leave_stopped:
      s.state = slot_state::stopped;
      events->stopped(s.def.name, s.pid, std::nullopt, d.reason);
      break;
    }
  }

  void fail_start(slot& s, bool exited) {
    starting = false;
    exit_code = 1;
    s.state = slot_state::gave_up;
    const std::string reason = exited ? "exited during start-up" : "did not start in time";
    events->gave_up(s.def.name, s.pid, reason);
    if (options.on_start) {
      const auto& log = s.def.spec.log_file;
      options.on_start(start_failure{s.def.name, exited, log, last_lines(read_text_file(log), 15)});
    }
    begin_down(options.stop_grace);
  }

  void owner_gone() {
    if (owner_fd >= 0) ::close(owner_fd);
    owner_fd = -1;
    events->owner_gone(options.owner_pid);
    begin_down(options.stop_grace);
  }

  void begin_down(std::chrono::milliseconds grace) {
    if (stopping) return;
    stopping = true;
    kill_deadline = clock_type::now() + grace;
    for (auto& s : slots) {
      if (s.alive()) {
        // The whole cluster goes: nobody is left to take work over, so no drain (SIGINT).
        s.child->signal(SIGINT);
        ++stopped_count;
      } else if (s.state == slot_state::restarting) {
        s.state = slot_state::stopped;
        events->stopped(s.def.name, s.pid, std::nullopt, "down while restarting");
      }
    }
  }

  bool anyone_alive() const {
    return std::any_of(slots.begin(), slots.end(), [](auto& s) { return s.alive(); });
  }

  json status() const {
    json processes = json::array();
    for (auto& s : slots)
      processes.push_back({{"process", s.def.name},
                           {"serves", s.serves.empty() ? process_kind_of(s.def.name) : s.serves},
                           {"instances", s.alive() ? s.instances : std::vector<std::string>{}},
                           {"state", to_string(s.state)},
                           {"phase", phase_of(s)},
                           {"ready", s.ready},
                           {"pid", s.alive() ? s.pid : 0},
                           {"restarts", s.restarts},
                           {"log", s.def.spec.log_file.string()},
                           {"last_exit", s.last_exit ? status_json(*s.last_exit) : json()}});
    return {{"ok", true}, {"supervisor_pid", ::getpid()}, {"processes", processes}};
  }

  void handle_request(client& c, const std::string& line) {
    json request;
    try {
      request = json::parse(line);
    } catch (const json::exception& e) {
      send_line(c.fd, {{"ok", false}, {"error", std::string("not JSON: ") + e.what()}});
      return;
    }
    const auto what = request.value("request", std::string());
    if (what == "status") {
      send_line(c.fd, status());
    } else if (what == "scale") {
      begin_scale(c, request);
    } else if (what == "down") {
      c.waits_for_down = true;
      begin_down(std::chrono::milliseconds(
          request.value("grace_ms", static_cast<long long>(options.stop_grace.count()))));
    } else {
      send_line(c.fd,
                {{"ok", false},
                 {"error", "unknown request '" + what + "' (expected status, scale or down)"}});
    }
  }

  slot* find_slot(const std::string& name) {
    for (auto& s : slots)
      if (s.def.name == name) return &s;
    return nullptr;
  }

  // {"request":"scale","counts":{"decode":1},"operation_id":"...","drain_timeout_ms":N}:
  // answered once the slots it starts are ready and those it drains are gone.
  void begin_scale(client& c, const json& request) {
    scale_request wanted;
    std::string drain;
    try {
      wanted.operation_id = request.value("operation_id", std::string());
      for (auto& [kind, count] : request.at("counts").items())
        wanted.counts[kind] = count.get<int>();
      drain = request.value("drain", std::string());
      wanted.switch_roles = request.value("switch", false);
    } catch (const json::exception& e) {
      send_line(c.fd, {{"ok", false}, {"error", std::string("bad scale request: ") + e.what()}});
      return;
    }
    if (!drain.empty() && drain != "finish" && drain != "migrate") {
      send_line(c.fd,
                {{"ok", false},
                 {"error", "bad scale request: drain must be \"finish\" or \"migrate\", not \"" +
                               drain + "\""}});
      return;
    }
    // The mode asked for, or each process's own default ([decode] drain) with SIGTERM.
    const int drain_signal = drain == "finish"    ? services::drain_finish_signal
                             : drain == "migrate" ? services::drain_migrate_signal
                                                  : SIGTERM;
    if (starting || stopping) {
      send_line(c.fd, {{"ok", false},
                       {"error",
                        starting ? "the cluster is still starting" : "the cluster is going down"}});
      return;
    }
    std::string answer;
    switch (scales.classify(wanted, &answer)) {
    case scale_operations::verdict::repeat:
      if (!answer.empty())
        send_line(c.fd, json::parse(answer));
      else
        c.waits_for_scale = true; // the same operation, still running
      return;
    case scale_operations::verdict::conflict:
      send_line(c.fd, {{"ok", false},
                       {"conflict", true},
                       {"error", scales.running() ? "another scale operation is running"
                                                  : "operation id '" + wanted.operation_id +
                                                        "' was used with other counts"}});
      return;
    case scale_operations::verdict::fresh:
      break;
    }
    std::vector<slot_view> views;
    for (auto& s : slots) views.push_back({s.def.name, s.wanted, s.serves});
    const auto plan =
        plan_scale(views, wanted, options.joins, options.switchable, options.join_groups);
    if (!plan.error.empty()) {
      send_line(c.fd, {{"ok", false}, {"error", plan.error}});
      return;
    }
    for (auto& name : plan.add) {
      slots.emplace_back(options.make_joined_slot(name));
      slots.back().wanted = false; // started below, like any slot the plan starts
    }
    scales.begin(wanted);
    c.waits_for_scale = true;
    scale_began = clock_type::now();
    drain_deadline =
        scale_began + std::chrono::milliseconds(request.value("drain_timeout_ms", 60'000));
    drain_killed = false;

    scale_start = plan.start;
    scale_stop = plan.stop;
    scale_switched.clear();
    for (auto& sw : plan.switches) {
      auto& s = *find_slot(sw.slot);
      s.serves = process_kind_of(s.def.name) == sw.to ? "" : sw.to;
      scale_switched.push_back(sw.slot);
      scale_start.push_back(sw.slot); // answered once it serves again
      if (!s.alive()) continue;       // restarting: it starts serving the new kind
      s.ready = false;
      s.ready_lines_before = lines_starting(read_text_file(s.def.spec.log_file), "ready").size();
      events->switching(s.def.name, s.pid, sw.to);
      s.child->signal(services::role_switch_signal(options.switchable.at(sw.to)));
    }
    for (auto& name : plan.stop) {
      auto& s = *find_slot(name);
      s.wanted = false;
      if (s.alive()) {
        // A role that ends announces it; the requests it held resume elsewhere.
        events->draining(s.def.name, s.pid);
        s.child->signal(drain_signal);
      } else if (s.state == slot_state::restarting || s.state == slot_state::gave_up) {
        s.state = slot_state::stopped;
        events->stopped(s.def.name, s.pid, std::nullopt, "scaled down");
      }
    }
    for (auto& name : plan.start) {
      auto& s = *find_slot(name);
      s.wanted = true;
      if (!s.alive() && s.state != slot_state::restarting) {
        s.policy = restart_policy(s.def.rules); // a fresh start: earlier failures forgiven
        spawn(s);
      }
    }
    check_scale_done();
  }

  void answer_scale(const json& answer) {
    scales.finish(answer.dump());
    for (auto& c : clients)
      if (std::exchange(c.waits_for_scale, false)) send_line(c.fd, answer);
  }

  void check_scale_done() {
    if (!scales.running()) return;
    for (auto& name : scale_start) {
      auto& s = *find_slot(name);
      if (s.state == slot_state::gave_up)
        return answer_scale({{"ok", false},
                             {"operation_id", scales.current()->operation_id},
                             {"error", name + " could not be started (given up on; see its log)"}});
      if (!s.ready) return;
    }
    for (auto& name : scale_stop)
      if (find_slot(name)->alive()) return;
    const double took = std::chrono::duration<double>(clock_type::now() - scale_began).count();
    std::vector<std::string> started; // scale_start waits for the switched slots too
    for (auto& name : scale_start)
      if (std::find(scale_switched.begin(), scale_switched.end(), name) == scale_switched.end())
        started.push_back(name);
    answer_scale({{"ok", true},
                  {"operation_id", scales.current()->operation_id},
                  {"took_s", took},
                  {"started", started},
                  {"stopped", scale_stop},
                  {"switched", scale_switched},
                  {"drain_killed", drain_killed}});
  }

  // Reads what a client sent; false when it has gone.
  bool read_client(client& c) {
    char buf[4096];
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    if (n == 0) return false; // gone: nobody to answer, even a `down` it asked for
    c.buffer.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = c.buffer.find('\n')) != std::string::npos;) {
      const auto line = c.buffer.substr(0, nl);
      c.buffer.erase(0, nl + 1);
      handle_request(c, line);
    }
    return c.buffer.size() < 65536; // no request is this long
  }

  void drain_inotify() {
    alignas(inotify_event) char buf[4096];
    std::set<fs::path> touched;
    for (ssize_t n; (n = ::read(inotify_fd, buf, sizeof buf)) > 0;)
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
        if (e->len > 0 && watched_dirs.count(e->wd)) touched.insert(watched_dirs[e->wd] / e->name);
        at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
    for (auto& s : slots)
      if (touched.count(s.def.spec.log_file)) check_ready(s);
  }

  // The file's mtime := now, made 0600 if it is new; the same inode the child touches.
  static void touch_private(const fs::path& file) {
    const int fd = transport::open_private_file(file, 0);
    ::futimens(fd, nullptr);
    ::close(fd);
  }

  // How long the slot's liveness file has gone untouched (by the wall clock, as mtimes are).
  static std::chrono::milliseconds silent_for(const fs::path& file) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) return std::chrono::milliseconds(0); // not made yet
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const auto ns = (static_cast<long long>(now.tv_sec) - st.st_mtim.tv_sec) * 1'000'000'000LL +
                    (now.tv_nsec - st.st_mtim.tv_nsec);
    return std::chrono::milliseconds(std::max(0LL, ns / 1'000'000));
  }

  // Liveness files are looked at a few times per (shortest) timeout, not at every wake-up:
  // the loop also wakes for every log line its children write.
  clock_type::time_point next_probe{};

  void probe_liveness() {
    const auto now = clock_type::now();
    if (now < next_probe) return;
    auto shortest = std::chrono::milliseconds::max();
    for (auto& s : slots)
      if (s.probed()) shortest = std::min(shortest, s.def.liveness_timeout);
    if (shortest == std::chrono::milliseconds::max()) return; // no slot has a probe
    next_probe = now + shortest / 4;
    for (auto& s : slots) {
      if (stopping || !s.probed() || !s.ready || s.hung_killed || !s.alive()) continue;
      const auto silent = silent_for(s.def.liveness_file);
      if (silent < s.def.liveness_timeout) continue;
      events->hung(s.def.name, s.pid, silent.count());
      if (s.child->signal(SIGKILL)) s.hung_killed = true;
    }
  }

  bool any_probe() const {
    return std::any_of(slots.begin(), slots.end(), [](auto& s) { return s.probed() && s.ready; });
  }

  void run_timers() {
    probe_liveness();
    const auto now = clock_type::now();
    if (scales.running() && !drain_killed && now >= drain_deadline) {
      drain_killed = true;
      for (auto& name : scale_stop)
        if (auto& s = *find_slot(name); s.alive()) s.child->signal(SIGKILL);
    }
    for (auto& s : slots)
      if (!stopping && s.state == slot_state::restarting && s.restart_at <= now) {
        ++s.restarts;
        spawn(s);
      }
    if (starting && !stopping && now >= start_deadline)
      for (auto& s : slots)
        if (!s.ever_ready) {
          fail_start(s, false);
          break;
        }
    if (stopping && !kill_sent && now >= kill_deadline) {
      kill_sent = true;
      for (auto& s : slots)
        if (s.alive() && s.child->signal(SIGKILL)) ++killed_count;
    }
  }

  int poll_timeout_ms() const {
    auto next = clock_type::time_point::max();
    for (auto& s : slots)
      if (s.state == slot_state::restarting && !stopping) next = std::min(next, s.restart_at);
    if (starting && !stopping) next = std::min(next, start_deadline);
    if (stopping && !kill_sent) next = std::min(next, kill_deadline);
    if (scales.running() && !drain_killed) next = std::min(next, drain_deadline);
    if (!stopping && any_probe()) next = std::min(next, next_probe);
    if (next == clock_type::time_point::max()) return -1;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(next - clock_type::now()).count();
    return static_cast<int>(std::clamp<long long>(left + 1, 0, 60'000));
  }

  void finish() {
    if (scales.running()) answer_scale({{"ok", false}, {"error", "the cluster went down"}});
    for (auto& c : clients)
      if (c.waits_for_down)
        send_line(c.fd, {{"ok", true}, {"stopped", stopped_count}, {"killed", killed_count}});
    std::error_code ec;
    for (auto& s : slots) fs::remove(pid_file(s), ec);
    fs::remove(pids_dir / "supervisor.pid", ec);
    listener.reset(); // the socket's name goes with it
  }

  int run() {
    begin();
    for (;;) {
      if (stopping && !anyone_alive()) break;
      // Fixed slots first, then one per child alive, then one per client.
      std::vector<pollfd> fds{{listener->fd(), POLLIN, 0}, {inotify_fd, POLLIN, 0}};
      const size_t signal_at = fds.size();
      if (signal_fd >= 0) fds.push_back({signal_fd, POLLIN, 0});
      const size_t owner_at = fds.size();
      if (owner_fd >= 0) fds.push_back({owner_fd, POLLIN, 0});
      const size_t fixed = fds.size();
      std::vector<slot*> watched;
      for (auto& s : slots)
        if (s.alive()) {
          fds.push_back({s.pidfd, POLLIN, 0});
          watched.push_back(&s);
        }
      const size_t first_client = fds.size();
      for (auto& c : clients) fds.push_back({c.fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR)
        throw std::runtime_error(std::string("poll failed: ") + std::strerror(errno));

      if (fds[1].revents) drain_inotify();
      if (signal_fd >= 0 && fds[signal_at].revents) {
        signalfd_siginfo info{};
        while (::read(signal_fd, &info, sizeof info) == sizeof info) {}
        begin_down(options.stop_grace);
      }
      if (owner_fd >= 0 && fds[owner_at].revents) owner_gone();
      for (size_t i = 0; i < watched.size(); ++i)
        if (fds[fixed + i].revents) on_exit(*watched[i]);
      std::vector<client> kept;
      for (size_t i = 0; i < clients.size(); ++i) {
        auto& c = clients[i];
        if (!fds[first_client + i].revents || read_client(c))
          kept.push_back(std::move(c));
        else
          ::close(c.fd);
      }
      clients = std::move(kept);
      if (fds[0].revents)
        for (int fd; (fd = listener->accept_own_user()) >= 0;) clients.push_back({fd, {}, false});
      run_timers();
      check_scale_done();
    }
    finish();
    return exit_code;
  }
};

supervisor::supervisor(supervisor_options options, std::vector<supervised_process> processes)
    : impl_(std::make_unique<impl>(std::move(options), std::move(processes))) {}

supervisor::~supervisor() = default;

int supervisor::run() {
  return impl_->run();
}

} // namespace supernode::services::cluster
