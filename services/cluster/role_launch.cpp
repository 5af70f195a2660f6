#include "services/cluster/role_launch.hpp"

#include <fstream>
#include <sstream>
#include <thread>

namespace supernode::services::cluster {

launch_spec role_spec(const role_command& command) {
  auto spec = self_command({"role", command.process, "--config", command.config.string()});
  for (auto& arg : command.join.empty()
                       ? std::vector<std::string>{"--id", std::to_string(command.id)}
                       : std::vector<std::string>{"--join", command.join})
    spec.argv.push_back(arg);
  if (command.model) {
    spec.argv.push_back("--model");
    spec.argv.push_back(command.model->string());
  }
  spec.stdout_to = output_to::file;
  spec.stderr_to = output_to::file;
  spec.log_file = command.log;
  spec.stdin_null = true;
  spec.new_session = command.new_session;
  return spec;
}

child_process launch_role(const role_command& command) {
  return child_process::launch(role_spec(command));
}

std::string start_failure::describe() const {
  return name + (exited ? " exited during start-up" : " did not start in time") + "; its log (" +
         log.string() + ") ends with:\n" + log_tail;
}

std::optional<start_failure> wait_until_ready(const std::vector<starting_process>& processes,
                                              std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<bool> ready(processes.size(), false);
  for (size_t left = processes.size(); left > 0;) {
    for (size_t i = 0; i < processes.size(); ++i) {
      if (ready[i]) continue;
      const auto& p = processes[i];
      // The exit is looked at before the log: one that printed "ready" and then exited was
      // ready, and its whole log is there to read.
      const bool exited = p.child->try_wait().has_value();
      const auto log = read_text_file(p.log);
      if (has_line_starting(log, "ready")) {
        ready[i] = true;
        --left;
      } else if (exited || std::chrono::steady_clock::now() > deadline) {
        return start_failure{p.name, exited, p.log, last_lines(log, 15)};
      }
    }
    if (left > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

std::string read_text_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool has_line_starting(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0 || text.find("\n" + prefix) != std::string::npos;
}

std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

std::string last_lines(const std::string& text, size_t lines) {
  // The newline before the last `lines` lines (a final newline ends the last line).
  size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;
  for (size_t n = 0; n < lines; ++n) {
    const size_t nl = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
    if (nl == std::string::npos) return text;
    end = nl;
  }
  return text.substr(end + 1);
}

} // namespace supernode::services::cluster
