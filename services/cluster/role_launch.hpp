#pragma once
// Starting `supernode role` processes the way `cluster up` and the benchmarks do: each with its
// own log file (stdout and stderr, so no pipe a chatty process could fill), ready once its log
// holds the line "ready" that a node prints when every role in it runs.

#include "services/cluster/process_launcher.hpp"

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace supernode::services::cluster {

struct role_command {
  std::string process; // a [process.NAME] of the config
  int id = 0;
  std::filesystem::path config;
  std::optional<std::filesystem::path> model;
  std::filesystem::path log; // truncated
  bool new_session = false;  // outlives the terminal (and the command) that started it
  // Members to join through (`--join` instead of `--id`): a process beyond the config's.
  std::string join;
};

// `supernode role PROCESS --config CONFIG (--id ID | --join MEMBERS) [--model MODEL]` from this
// binary, stdin from /dev/null, stdout and stderr to the log.
launch_spec role_spec(const role_command& command);
// That command, started.
child_process launch_role(const role_command& command);

// A started process whose log is watched for its "ready" line.
struct starting_process {
  std::string name;
  child_process* child = nullptr;
  std::filesystem::path log;
};

// Why a process did not start.
struct start_failure {
  std::string name;
  bool exited = false; // exited during start-up; otherwise not ready in time
  std::filesystem::path log;
  std::string log_tail;
  // "NAME exited during start-up; its log (LOG) ends with:\nTAIL"
  std::string describe() const;
};

// Until every log holds a "ready" line; the first process that exits before it or is not
// ready within `timeout`, or nothing when all are ready. Logs are read every 20 ms: they are
// files, so there is nothing to block on.
std::optional<start_failure> wait_until_ready(const std::vector<starting_process>& processes,
                                              std::chrono::seconds timeout);

// A file's whole text ("" when it cannot be read).
std::string read_text_file(const std::filesystem::path& file);
// Whether a line of `text` starts with `prefix`.
bool has_line_starting(const std::string& text, const std::string& prefix);
// The lines of `text` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix);
// The last `lines` lines of `text`.
std::string last_lines(const std::string& text, size_t lines);

} // namespace supernode::services::cluster
