#include "apps/cli_args.hpp"

#include <charconv>
#include <cstdlib>

namespace supernode::apps {

std::vector<int32_t> parse_id_list(const std::string& text, const std::string& option) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    int32_t v = 0;
    auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size())
      throw usage_error(option + " expects comma-separated integers; bad item '" + item + "'");
    ids.push_back(v);
    start = end + 1;
  }
  return ids;
}

cli_args::cli_args(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i) args_.emplace_back(argv[i]);
}

std::optional<std::string> cli_args::take(const std::string& name) {
  for (size_t i = 0; i < args_.size(); ++i) {
    if (args_[i] == name) {
      if (i + 1 >= args_.size()) throw usage_error(name + " needs a value");
      std::string v = args_[i + 1];
      args_.erase(args_.begin() + i, args_.begin() + i + 2);
      return v;
    }
    if (args_[i].rfind(name + "=", 0) == 0) {
      std::string v = args_[i].substr(name.size() + 1);
      args_.erase(args_.begin() + i);
      return v;
    }
  }
  return std::nullopt;
}

std::string cli_args::take_or(const std::string& name, const std::string& fallback) {
  auto v = take(name);
  return v ? *v : fallback;
}

int64_t cli_args::take_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) {
  auto v = take(name);
  if (!v) return fallback;
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || p != v->data() + v->size())
    throw usage_error(name + " expects an integer, got '" + *v + "'");
  if (out < min || out > max)
    throw usage_error(name + " must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                      "], got " + *v);
  return out;
}

double cli_args::take_double(const std::string& name, double fallback, double min, double max) {
  auto v = take(name);
  if (!v) return fallback;
  char* end = nullptr;
  double out = std::strtod(v->c_str(), &end);
  if (v->empty() || end != v->c_str() + v->size())
    throw usage_error(name + " expects a number, got '" + *v + "'");
  if (!(out >= min && out <= max))
    throw usage_error(name + " must be in [" + std::to_string(min) + ", " + std::to_string(max) +
                      "], got " + *v);
  return out;
}

bool cli_args::take_flag(const std::string& name) {
  for (size_t i = 0; i < args_.size(); ++i)
    if (args_[i] == name) {
      args_.erase(args_.begin() + i);
      return true;
    }
  return false;
}

std::optional<std::string> cli_args::take_positional() {
  if (args_.empty() || args_.front().rfind("--", 0) == 0) return std::nullopt;
  std::string v = args_.front();
  args_.erase(args_.begin());
  return v;
}

void cli_args::expect_consumed(const std::string& command) const {
  if (!args_.empty()) throw usage_error("unknown argument '" + args_.front() + "' for " + command);
}

} // namespace supernode::apps
