// The supervisor with stand-in children (/bin/sh scripts): the events it logs and their order,
// a SIGKILLed child back with a new pid in its pid file, a child that keeps crashing given up
// on, a start that fails, and `status` and `down` over its control socket.

#include "../../support/eventually.hpp"
#include "../../support/test_run_dir.hpp"
#include "services/cluster/control_socket.hpp"
#include "services/cluster/supervisor.hpp"
#include "transport/private_files.hpp"

#include <csignal>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>

using namespace supernode::services::cluster;
using supernode::testing::eventually;
using json = nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

restart_rules quick_rules(supernode::transport::restart_mode mode, int max_restarts = 5) {
  restart_rules r;
  r.mode = mode;
  r.backoff = 10ms;
  r.backoff_max = 40ms;
  r.max_restarts = max_restarts;
  return r;
}

// A supervisor of shell scripts in a run folder of its own, run on a thread of the test.
class supervised_run {
public:
  supervised_run() : folder_("supervisor") {
    supernode::transport::ensure_private_dir(run_dir() / "logs");
  }
  ~supervised_run() {
    if (thread_.joinable()) {
      try {
        down();
      } catch (...) {}
      thread_.join();
    }
  }

  void add(const std::string& name, const std::string& script, restart_rules rules) {
    launch_spec spec;
    spec.argv = {"/bin/sh", "-c", script};
    spec.stdout_to = output_to::file;
    spec.stderr_to = output_to::file;
    spec.log_file = log_of(name);
    spec.stdin_null = true;
    processes_.push_back({name, spec, rules, {}, {}});
  }

  void probe(const std::string& name, std::chrono::milliseconds timeout) {
    for (auto& p : processes_)
      if (p.name == name) {
        p.liveness_timeout = timeout;
        p.liveness_file = run_dir() / "alive" / name;
      }
  }

  void set_program(const std::string& name, const std::string& program) {
    for (auto& p : processes_)
      if (p.name == name) p.spec.program = program;
  }

  void start(std::chrono::milliseconds start_timeout = 20s, pid_t owner = 0) {
    supervisor_options options;
    options.run_dir = run_dir();
    options.owner_pid = owner;
    options.start_timeout = start_timeout;
    options.stop_grace = 2s;
    options.on_start = [this](const std::optional<start_failure>& f) {
      std::lock_guard lock(mutex_);
      start_result_ = f ? f->describe() : "up";
    };
    thread_ = std::thread([this, options] {
      supervisor s(options, processes_);
      exit_code_ = s.run();
    });
  }

  std::string start_result() {
    std::lock_guard lock(mutex_);
    return start_result_;
  }
  bool wait_started() {
    return eventually([&] { return !start_result().empty(); });
  }

  std::vector<json> events() const {
    std::vector<json> out;
    std::ifstream in(run_dir() / "events.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
    return out;
  }
  // The events of one slot, as "event" or "event:detail" words, in order.
  std::vector<std::string> story(const std::string& process) const {
    std::vector<std::string> out;
    for (auto& e : events())
      if (e["process"] == process) out.push_back(e["event"].get<std::string>());
    return out;
  }
  size_t count(const std::string& process, const std::string& event) const {
    size_t n = 0;
    for (auto& e : events()) n += e["process"] == process && e["event"] == event;
    return n;
  }
  pid_t pid_in_file(const std::string& process) const {
    pid_t pid = 0;
    std::ifstream(run_dir() / "pids" / (process + ".pid")) >> pid;
    return pid;
  }

  json ask(const json& request) const {
    auto answer = ask_control(socket(), request.dump(), 10s);
    if (!answer) throw std::runtime_error("no supervisor answers");
    return json::parse(*answer);
  }
  json down() { return ask({{"request", "down"}, {"grace_ms", 2000}}); }
  int join() {
    thread_.join();
    return exit_code_;
  }

  fs::path socket() const { return run_dir() / "supervisor.sock"; }
  fs::path log_of(const std::string& name) const { return run_dir() / "logs" / (name + ".log"); }
  const fs::path& run_dir() const { return folder_.path(); }

private:
  supernode::testing::test_run_dir folder_;
  std::vector<supervised_process> processes_;
  std::thread thread_;
  int exit_code_ = -1;
  std::mutex mutex_;
  std::string start_result_;
};

const std::string sleeper = "echo ready; exec sleep 600";
using supernode::transport::restart_mode;

} // namespace

TEST(supervisor, a_killed_child_is_restarted_with_a_new_pid_and_every_step_is_logged) {
  supervised_run run;
  run.add("sleeper-0", sleeper, quick_rules(restart_mode::on_failure));
  run.start();
  ASSERT_TRUE(run.wait_started());
  ASSERT_EQ(run.start_result(), "up");

  // The run folder's files are this user's alone.
  struct stat st {};
  ASSERT_EQ(::stat(run.socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((run.run_dir() / "events.jsonl").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  pid_t supervisor_pid = 0;
  std::ifstream(run.run_dir() / "pids" / "supervisor.pid") >> supervisor_pid;
  EXPECT_EQ(supervisor_pid, ::getpid());

  const pid_t first = run.pid_in_file("sleeper-0");
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  // Back: a new pid in the pid file, ready again.
  ASSERT_TRUE(eventually([&] { return run.count("sleeper-0", "ready") == 2; }))
      << run.events().size();
  const pid_t second = run.pid_in_file("sleeper-0");
  EXPECT_GT(second, 0);
  EXPECT_NE(second, first);
  EXPECT_EQ(::kill(second, 0), 0);

  const auto events = run.events();
  ASSERT_EQ(events.size(), 6u);
  const std::vector<std::string> expected{"spawned",    "ready",   "exited",
                                          "restarting", "spawned", "ready"};
  EXPECT_EQ(run.story("sleeper-0"), expected);
  EXPECT_EQ(events[0]["pid"], first);
  EXPECT_EQ(events[2]["pid"], first);
  EXPECT_EQ(events[2]["signal"], "SIGKILL");
  EXPECT_EQ(events[2]["signal_number"], 9);
  EXPECT_FALSE(events[2].contains("code"));
  EXPECT_EQ(events[3]["attempt"], 1);
  EXPECT_EQ(events[3]["backoff_ms"], 10);
  EXPECT_EQ(events[4]["pid"], second);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GE(events[i]["t"], events[i - 1]["t"]);
  EXPECT_TRUE(fs::exists(run.log_of("sleeper-0").string() + ".1")) << "the dead run's log is kept";

  const auto status = run.ask({{"request", "status"}});
  ASSERT_EQ(status["processes"].size(), 1u);
  const auto& slot = status["processes"][0];
  EXPECT_EQ(slot["state"], "running");
  EXPECT_EQ(slot["ready"], true);
  EXPECT_EQ(slot["pid"], second);
  EXPECT_EQ(slot["restarts"], 1);
  EXPECT_EQ(slot["last_exit"]["signal"], "SIGKILL");

  // down: answered once the child is gone; then the supervisor ends and tidies up.
  const auto answer = run.down();
  EXPECT_EQ(answer["ok"], true);
  EXPECT_EQ(answer["stopped"], 1);
  EXPECT_EQ(answer["killed"], 0);
  EXPECT_EQ(run.join(), 0);
  EXPECT_NE(::kill(second, 0), 0);
  EXPECT_FALSE(fs::exists(run.socket()));
  EXPECT_FALSE(fs::exists(run.run_dir() / "pids" / "sleeper-0.pid"));
  EXPECT_FALSE(fs::exists(run.run_dir() / "pids" / "supervisor.pid"));
  const auto last = run.events().back();
  EXPECT_EQ(last["event"], "stopped");
  EXPECT_EQ(last["signal"], "SIGINT") << "down stops at once: no drain, nobody takes work over";
}

// `cluster up --owner-pid`: the test harness's case. The owner's end is a `down`, and nothing is
// restarted after it.
TEST(supervisor, the_cluster_goes_down_when_its_owner_ends) {
  launch_spec owner_spec;
  owner_spec.argv = {"/bin/sh", "-c", "exec sleep 600"};
  owner_spec.stdin_null = true;
  auto owner = child_process::launch(owner_spec);
  supervised_run run;
  run.add("sleeper-0", sleeper, quick_rules(restart_mode::always));
  run.add("sleeper-1", sleeper, quick_rules(restart_mode::always));
  run.start(20s, owner.pid());
  ASSERT_TRUE(run.wait_started());
  ASSERT_EQ(run.start_result(), "up");
  const pid_t first = run.pid_in_file("sleeper-0"), second = run.pid_in_file("sleeper-1");

  ASSERT_TRUE(owner.signal(SIGKILL));
  ASSERT_TRUE(owner.wait_for(10s));
  EXPECT_EQ(run.join(), 0);
  EXPECT_NE(::kill(first, 0), 0);
  EXPECT_NE(::kill(second, 0), 0);
  EXPECT_EQ(run.count("supervisor", "owner_gone"), 1u);
  for (const auto* slot : {"sleeper-0", "sleeper-1"}) {
    EXPECT_EQ(run.count(slot, "stopped"), 1u) << slot;
    EXPECT_EQ(run.count(slot, "restarting"), 0u) << slot;
  }
  EXPECT_FALSE(fs::exists(run.socket()));
}

// An owner gone before the supervisor begins: nothing starts.
TEST(supervisor, an_owner_already_gone_starts_nothing) {
  launch_spec owner_spec;
  owner_spec.argv = {"/bin/true"};
  auto owner = child_process::launch(owner_spec);
  const pid_t gone = owner.pid();
  ASSERT_TRUE(owner.wait_for(10s)); // reaped: the pid names nobody now
  supervised_run run;
  run.add("sleeper-0", sleeper, quick_rules(restart_mode::always));
  run.start(20s, gone);
  EXPECT_EQ(run.join(), 0);
  EXPECT_EQ(run.count("supervisor", "owner_gone"), 1u);
  EXPECT_EQ(run.count("sleeper-0", "spawned"), 0u);
}

TEST(supervisor, a_child_that_stops_beating_is_killed_as_hung_and_restarted) {
  // The stand-in beats like a role process: it touches the file SUPERNODE_LIVENESS_FILE names
  // every 50 ms. SIGSTOPped, it stops; the probe kills it and the policy restarts it.
  supervised_run run;
  run.add("beater-0",
          "echo ready; while :; do touch \"$SUPERNODE_LIVENESS_FILE\"; sleep 0.05; done",
          quick_rules(restart_mode::on_failure));
  run.add("sleeper-0", sleeper, quick_rules(restart_mode::on_failure)); // no probe: never hung
  run.probe("beater-0", 600ms);
  run.start();
  ASSERT_TRUE(run.wait_started());
  ASSERT_EQ(run.start_result(), "up");
  const pid_t first = run.pid_in_file("beater-0");
  ASSERT_GT(first, 0);
  ASSERT_TRUE(eventually([&] { return fs::exists(run.run_dir() / "alive" / "beater-0"); }));
  ASSERT_EQ(::kill(first, SIGSTOP), 0);
  ASSERT_TRUE(eventually([&] { return run.count("beater-0", "ready") == 2; }))
      << run.events().size();
  const std::vector<std::string> expected{"spawned",    "ready",   "hung", "exited",
                                          "restarting", "spawned", "ready"};
  EXPECT_EQ(run.story("beater-0"), expected);
  for (auto& e : run.events())
    if (e["event"] == "hung") {
      EXPECT_EQ(e["pid"], first);
      EXPECT_GE(e["silent_ms"].get<int>(), 600);
    } else if (e["event"] == "exited") {
      EXPECT_EQ(e["signal"], "SIGKILL");
    }
  EXPECT_NE(run.pid_in_file("beater-0"), first);
  EXPECT_EQ(run.count("sleeper-0", "hung"), 0u);
  EXPECT_EQ(run.down()["stopped"], 2);
  EXPECT_EQ(run.join(), 0);
}

TEST(supervisor, scale_drains_slots_without_restarting_them_and_starts_them_again) {
  supervised_run run;
  run.add("gateway-0", sleeper, quick_rules(restart_mode::always));
  run.add("worker-0", sleeper, quick_rules(restart_mode::always));
  run.add("worker-1", sleeper, quick_rules(restart_mode::always));
  run.start();
  ASSERT_TRUE(run.wait_started());
  ASSERT_EQ(run.start_result(), "up");
  const pid_t second = run.pid_in_file("worker-1");

  const json down_to_one = {
      {"request", "scale"}, {"counts", {{"worker", 1}}}, {"operation_id", "op-1"}};
  const auto answer = run.ask(down_to_one);
  ASSERT_EQ(answer["ok"], true) << answer.dump();
  EXPECT_EQ(answer["stopped"], json::array({"worker-1"}));
  EXPECT_EQ(answer["started"], json::array());
  EXPECT_EQ(answer["drain_killed"], false);
  EXPECT_GE(answer["took_s"].get<double>(), 0.0);
  // Drained with SIGTERM and left stopped, though its policy restarts every exit.
  EXPECT_NE(::kill(second, 0), 0);
  const std::vector<std::string> drained{"spawned", "ready", "draining", "stopped"};
  EXPECT_EQ(run.story("worker-1"), drained);
  EXPECT_EQ(run.events().back()["reason"], "scaled down");
  auto status = run.ask({{"request", "status"}});
  std::map<std::string, json> by_name;
  for (auto& p : status["processes"]) by_name[p["process"].get<std::string>()] = p;
  EXPECT_EQ(by_name["worker-1"]["state"], "stopped");
  EXPECT_EQ(by_name["worker-1"]["phase"], "down");
  EXPECT_EQ(by_name["worker-0"]["phase"], "serving");

  // The same operation again: its first answer; the id with other counts: a conflict.
  EXPECT_EQ(run.ask(down_to_one), answer);
  const auto reused =
      run.ask({{"request", "scale"}, {"counts", {{"worker", 2}}}, {"operation_id", "op-1"}});
  EXPECT_EQ(reused["ok"], false);
  EXPECT_EQ(reused["conflict"], true);
  const auto too_many = run.ask({{"request", "scale"}, {"counts", {{"worker", 3}}}});
  EXPECT_EQ(too_many["ok"], false);
  EXPECT_NE(too_many["error"].get<std::string>().find("2 slot(s)"), std::string::npos);

  const auto up = run.ask({{"request", "scale"}, {"counts", {{"worker", 2}}}});
  ASSERT_EQ(up["ok"], true) << up.dump();
  EXPECT_EQ(up["started"], json::array({"worker-1"}));
  const pid_t back = run.pid_in_file("worker-1");
  EXPECT_GT(back, 0);
  EXPECT_NE(back, second);
  status = run.ask({{"request", "status"}});
  for (auto& p : status["processes"]) EXPECT_EQ(p["phase"], "serving") << p.dump();
  EXPECT_EQ(run.down()["stopped"], 3);
  EXPECT_EQ(run.join(), 0);
}

TEST(supervisor, a_child_that_keeps_crashing_is_given_up_on_and_a_clean_exit_is_left_stopped) {
  supervised_run run;
  run.add("crasher-0", "echo ready; exit 3", quick_rules(restart_mode::on_failure, 2));
  run.add("quitter-0", "echo ready; exit 0", quick_rules(restart_mode::on_failure));
  run.add("sleeper-0", sleeper, quick_rules(restart_mode::never));
  run.start();
  ASSERT_TRUE(eventually([&] { return run.count("crasher-0", "gave_up") == 1; }));
  ASSERT_TRUE(eventually([&] { return run.count("quitter-0", "stopped") == 1; }));

  const std::vector<std::string> crashes{"spawned", "ready", "exited", "restarting",
                                         "spawned", "ready", "exited", "restarting",
                                         "spawned", "ready", "exited", "gave_up"};
  EXPECT_EQ(run.story("crasher-0"), crashes);
  std::vector<int> backoffs;
  for (auto& e : run.events())
    if (e["process"] == "crasher-0") {
      if (e["event"] == "exited") {
        EXPECT_EQ(e["code"], 3);
      } else if (e["event"] == "restarting") {
        backoffs.push_back(e["backoff_ms"]);
      } else if (e["event"] == "gave_up") {
        EXPECT_EQ(e["reason"], "3 exits within 60 s (max_restarts = 2)");
      }
    }
  EXPECT_EQ(backoffs, (std::vector<int>{10, 20}));
  EXPECT_FALSE(fs::exists(run.run_dir() / "pids" / "crasher-0.pid"));
  const std::vector<std::string> quit{"spawned", "ready", "exited", "stopped"};
  EXPECT_EQ(run.story("quitter-0"), quit);

  const auto status = run.ask({{"request", "status"}});
  std::map<std::string, json> by_name;
  for (auto& p : status["processes"]) by_name[p["process"].get<std::string>()] = p;
  EXPECT_EQ(by_name["crasher-0"]["state"], "gave_up");
  EXPECT_EQ(by_name["crasher-0"]["restarts"], 2);
  EXPECT_EQ(by_name["crasher-0"]["pid"], 0);
  EXPECT_EQ(by_name["crasher-0"]["last_exit"]["code"], 3);
  EXPECT_EQ(by_name["quitter-0"]["state"], "stopped");
  EXPECT_EQ(by_name["sleeper-0"]["state"], "running");

  EXPECT_EQ(run.ask({{"request", "reboot"}})["ok"], false);
  EXPECT_EQ(run.down()["stopped"], 1);
  EXPECT_EQ(run.join(), 0);
}

TEST(supervisor, a_child_that_exits_during_start_up_fails_the_start_and_stops_the_rest) {
  supervised_run run;
  run.add("sleeper-0", sleeper, quick_rules(restart_mode::always));
  run.add("broken-0", "echo 'cannot bind the port' >&2; exit 3", quick_rules(restart_mode::always));
  run.start();
  EXPECT_EQ(run.join(), 1);
  EXPECT_NE(run.start_result().find("broken-0 exited during start-up"), std::string::npos)
      << run.start_result();
  EXPECT_NE(run.start_result().find("cannot bind the port"), std::string::npos)
      << run.start_result();
  EXPECT_EQ(run.count("broken-0", "gave_up"), 1u);
  EXPECT_EQ(run.count("broken-0", "restarting"), 0u) << "a start-up failure is not restarted";
  EXPECT_EQ(run.story("sleeper-0").back(), "stopped");
  EXPECT_FALSE(fs::exists(run.socket()));
  EXPECT_FALSE(fs::exists(run.run_dir() / "pids" / "sleeper-0.pid"));
}

TEST(supervisor, a_child_never_ready_fails_the_start_after_the_timeout) {
  supervised_run run;
  run.add("mute-0", "exec sleep 600", quick_rules(restart_mode::always));
  run.start(300ms);
  EXPECT_EQ(run.join(), 1);
  EXPECT_NE(run.start_result().find("mute-0 did not start in time"), std::string::npos)
      << run.start_result();
  const std::vector<std::string> expected{"spawned", "gave_up", "stopped"};
  EXPECT_EQ(run.story("mute-0"), expected);
}

TEST(supervisor, the_control_socket_answers_no_other_user) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to connect as another user (nobody)";
  const passwd* nobody = ::getpwnam("nobody");
  ASSERT_NE(nobody, nullptr);
  supervised_run run;
  run.add("sleeper-0", sleeper, quick_rules(restart_mode::never));
  run.start();
  ASSERT_TRUE(run.wait_started());
  // Folder and socket opened up, so only the SO_PEERCRED check is left to refuse.
  fs::permissions(run.run_dir(), fs::perms::owner_all | fs::perms::others_exec);
  fs::permissions(run.socket(), fs::perms::all);
  const uid_t uid = nobody->pw_uid;
  const gid_t gid = nobody->pw_gid;
  const auto socket = run.socket();
  auto intruder = child_process::fork_running([&] {
    if (::setgid(gid) != 0 || ::setuid(uid) != 0) return 2;
    // A raw client: ask_control would itself refuse a supervisor of another user.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket.c_str(), sizeof addr.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 3;
    const std::string request = "{\"request\":\"down\"}\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) return 0; // closed at once
    char answer[64];
    return ::recv(fd, answer, sizeof answer, 0) > 0 ? 1 : 0; // 0: closed unanswered
  });
  const auto refused = intruder.wait_for(20s);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code(), 0) << "1: answered; 2: setuid failed; 3: cannot connect";
  EXPECT_EQ(run.ask({{"request", "status"}})["processes"][0]["state"], "running");
}

TEST(supervisor, each_run_starts_its_own_event_log_and_keeps_the_previous_one) {
  supervised_run run;
  run.add("mute-0", "exec sleep 600", quick_rules(restart_mode::never));
  const auto events = run.run_dir() / "events.jsonl";
  supernode::transport::write_private_file(events, "{\"event\":\"from an earlier run\"}\n");
  run.start(100ms);
  EXPECT_EQ(run.join(), 1);
  EXPECT_EQ(read_text_file(events.string() + ".1"), "{\"event\":\"from an earlier run\"}\n");
  EXPECT_EQ(run.story("mute-0").front(), "spawned");
  EXPECT_EQ(run.events().size(), 3u);
}

TEST(supervisor, a_program_that_cannot_be_executed_fails_the_start_naming_it) {
  supervised_run run;
  run.add("sleeper-0", sleeper, quick_rules(restart_mode::always));
  run.add("missing-0", "unused", quick_rules(restart_mode::always));
  run.set_program("missing-0", "/nonexistent/supernode");
  run.start();
  EXPECT_EQ(run.join(), 1);
  EXPECT_NE(run.start_result().find("missing-0 exited during start-up"), std::string::npos)
      << run.start_result();
  EXPECT_NE(run.start_result().find("cannot execute /nonexistent/supernode"), std::string::npos)
      << run.start_result();
  const auto events = run.events();
  ASSERT_GE(events.size(), 3u);
  for (auto& e : events)
    if (e["process"] == "missing-0" && e["event"] == "exited") {
      EXPECT_EQ(e["pid"], 0);
      EXPECT_EQ(e["code"], 127);
    }
  EXPECT_EQ(run.story("sleeper-0").back(), "stopped");
}
