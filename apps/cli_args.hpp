#pragma once
// Command-line options of the form `--name value` and `--flag`. Each command takes the
// options it knows; whatever is left is reported as unknown, so typos never pass silently.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace supernode::apps {

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "1,2,3" -> {1, 2, 3}; usage_error naming the bad item otherwise.
std::vector<int32_t> parse_id_list(const std::string& text, const std::string& option);

class cli_args {
public:
  cli_args(int argc, char** argv, int first);
  explicit cli_args(std::vector<std::string> args) : args_(std::move(args)) {}

  std::optional<std::string> take(const std::string& name);
  std::string take_or(const std::string& name, const std::string& fallback);
  int64_t take_int(const std::string& name, int64_t fallback, int64_t min, int64_t max);
  double take_double(const std::string& name, double fallback, double min, double max);
  bool take_flag(const std::string& name);
  // The next argument that is not an option (a subcommand), if any.
  std::optional<std::string> take_positional();
  // Everything not yet taken, in order (for a command that parses its own options).
  std::vector<std::string> take_rest() { return std::move(args_); }
  // Throws usage_error naming the first argument nobody took.
  void expect_consumed(const std::string& command) const;

private:
  std::vector<std::string> args_;
};

} // namespace supernode::apps
