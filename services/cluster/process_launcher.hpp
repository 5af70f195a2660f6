#pragma once
// Starting and stopping child processes: the one launcher behind `supernode cluster`, the
// benchmarks and the tests that cross process boundaries. A child is started from a program
// (usually this binary) or forked to run a function; its output is inherited, piped back to us
// line by line, written to a log file or dropped; a launched program gets stdin, stdout and
// stderr and no other descriptor; waits take a deadline (on a pidfd, not a polling loop) and a
// child still running when its handle goes is killed.

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace supernode::services::cluster {

// Where a child's stdout or stderr goes.
enum class output_to {
  inherit, // ours
  pipe,    // back to us: read_line, wait_for_line, for_each_line (stderr: into stdout's pipe)
  file,    // the spec's log_file, truncated (stdout and stderr may share it)
  null,    // /dev/null
};

struct launch_spec {
  // argv[0] is the name the program sees.
  std::vector<std::string> argv;
  // What is executed: a path, or a name looked up in PATH; empty means argv[0].
  std::string program;
  // Set in the child's environment on top of ours.
  std::vector<std::pair<std::string, std::string>> env;
  output_to stdout_to = output_to::inherit;
  output_to stderr_to = output_to::inherit;
  std::filesystem::path log_file;
  bool stdin_null = false;
  // A session of its own (setsid), so it outlives the terminal that started it.
  bool new_session = false;
  // SIGKILL when we die, so no child outlives a crashed parent.
  bool die_with_parent = false;
};

// This binary, for children that run another of its commands.
std::string self_executable();

// `supernode ARGS...` from this binary.
launch_spec self_command(std::vector<std::string> args);

// How a child ended, from its wait status.
struct exit_status {
  int raw = 0;
  // False when something else reaped the child (a signal watcher) and the status is lost.
  bool known = true;

  bool exited() const;
  int code() const;       // the exit code, when exited()
  int signal() const;     // the signal that ended it, 0 when it exited
  bool success() const;   // exited with code 0
  int shell_code() const; // the exit code, or 128 + signal as a shell reports it
};

class child_process {
public:
  // Throws std::runtime_error when the program cannot be executed (the child's exec error).
  static child_process launch(const launch_spec& spec);
  // A fork of this process that runs `body` and exits with its result (an exception is
  // exit code 1). Only for callers without threads yet: the fork copies just the caller's one.
  static child_process fork_running(const std::function<int()>& body, bool die_with_parent = true);

  child_process(child_process&& other) noexcept;
  child_process& operator=(child_process&& other) noexcept;
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;
  // SIGKILL and reaped, when still running and not released.
  ~child_process();

  pid_t pid() const { return pid_; }
  // Not yet seen to exit.
  bool running() const { return pid_ > 0 && !reaped_; }

  // The next stdout line (a piped stdout only), without its newline; nothing on timeout or EOF.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  // Reads stdout lines until one starting with `prefix` arrives; nothing on timeout or EOF.
  std::optional<std::string> wait_for_line(const std::string& prefix,
                                           std::chrono::milliseconds timeout);
  // Every stdout line until the child closes it.
  void for_each_line(const std::function<void(const std::string&)>& on_line);

  // Sends `sig`; false when the child is gone.
  bool signal(int sig);
  // The exit, if it has come.
  std::optional<exit_status> try_wait();
  // Waits up to `timeout` for the exit; nothing when it is still running then.
  std::optional<exit_status> wait_for(std::chrono::milliseconds timeout);
  // Waits for the exit, however long it takes.
  exit_status wait();
  // SIGTERM, then SIGKILL when it has not exited after `grace`; the exit.
  exit_status stop(std::chrono::milliseconds grace);
  // SIGKILL and the exit.
  exit_status kill();
  // The process outlives this handle (and us): nothing kills or reaps it here. Its pid.
  pid_t release();

private:
  child_process(pid_t pid, int out) : pid_(pid), out_(out) {}
  std::optional<exit_status> reap(int flags);
  bool fill_buffer(std::chrono::steady_clock::time_point deadline);
  void close_output();

  pid_t pid_ = -1;
  int out_ = -1; // read end of the stdout pipe, or -1
  bool reaped_ = false;
  std::optional<exit_status> status_;
  std::string buffer_; // stdout read but not yet returned as lines
};

} // namespace supernode::services::cluster
