#include "apps/bench/scale_script.hpp"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iomanip>
#include <sstream>
#include <stdexcept>

namespace supernode::apps {

namespace {

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, by);)
    if (!part.empty()) out.push_back(part);
  return out;
}

// "2026-12-02T00:58:25.992Z ..." -> unix seconds; nothing when the line has no such stamp.
std::optional<double> unix_time_of(const std::string& line) {
  std::tm tm{};
  if (line.size() < 24 || line[10] != 'T' || line[23] != 'Z') return std::nullopt;
  std::istringstream in(line.substr(0, 19));
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return std::nullopt;
  return static_cast<double>(timegm(&tm)) + std::stoi(line.substr(20, 3)) / 1000.0;
}

// The text between `open` and `close` after `from` in `line`, or "".
std::string between(const std::string& line, const std::string& open, const std::string& close,
                    size_t from = 0) {
  const auto a = line.find(open, from);
  if (a == std::string::npos) return "";
  const auto b = line.find(close, a + open.size());
  return b == std::string::npos ? "" : line.substr(a + open.size(), b - a - open.size());
}

} // namespace

std::vector<scripted_scale> parse_scale_script(const std::string& text, double time_factor) {
  std::vector<scripted_scale> out;
  for (const auto& step_text : split(text, ';')) {
    scripted_scale s;
    s.text = step_text;
    const auto colon = step_text.find(':');
    auto bad = [&](const std::string& why) {
      return std::invalid_argument("--script: '" + step_text + "': " + why);
    };
    if (colon == std::string::npos) throw bad("expected AT:KIND=N[,KIND=N][@mode]");
    try {
      size_t used = 0;
      s.at_s = std::stod(step_text.substr(0, colon), &used) * time_factor;
      if (used != colon || s.at_s < 0) throw std::invalid_argument("time");
    } catch (const std::exception&) {
      throw bad("the time must be seconds >= 0");
    }
    std::string counts = step_text.substr(colon + 1);
    if (const auto at = counts.find('@'); at != std::string::npos) {
      const auto mode = counts.substr(at + 1);
      counts.resize(at);
      if (mode == "switch")
        s.switch_roles = true;
      else if (mode == "finish" || mode == "migrate")
        s.drain = mode;
      else
        throw bad("the mode must be finish, migrate or switch, not '" + mode + "'");
    }
    for (const auto& pair : split(counts, ',')) {
      const auto eq = pair.find('=');
      if (eq == std::string::npos || eq == 0) throw bad("'" + pair + "' is not KIND=N");
      try {
        size_t used = 0;
        const int n = std::stoi(pair.substr(eq + 1), &used);
        if (used != pair.size() - eq - 1 || n < 0) throw std::invalid_argument("count");
        s.counts[pair.substr(0, eq)] = n;
      } catch (const std::exception&) {
        throw bad("the count of '" + pair + "' must be a whole number >= 0");
      }
    }
    if (s.counts.empty()) throw bad("no KIND=N");
    if (!out.empty() && s.at_s < out.back().at_s) throw bad("the times must not go back");
    out.push_back(std::move(s));
  }
  if (out.empty()) throw std::invalid_argument("--script: no step");
  return out;
}

long long ep_reform::pause_ms() const {
  return std::llround((last_s - first_s) * 1000) + longest_rank_pause_ms;
}

std::vector<ep_reform> ep_reforms_in(const std::vector<std::string>& log_texts, double unix_t0) {
  std::map<std::string, ep_reform> by_epoch;
  for (const auto& text : log_texts) {
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find("expert parallelism: ");
      if (at == std::string::npos || line.find(" re-formed over ", at) == std::string::npos)
        continue;
      const auto t = unix_time_of(line);
      const auto epoch = between(line, "(epoch ", ")", at);
      if (!t || *t < unix_t0 || epoch.empty()) continue;
      auto& r = by_epoch[epoch];
      const double since = *t - unix_t0;
      if (r.lines++ == 0) {
        r.epoch = epoch;
        r.group = between(line, "expert parallelism: ", " re-formed", at);
        r.ranks = between(line, " re-formed over ", " (epoch", at);
        r.first_s = r.last_s = since;
      }
      r.first_s = std::min(r.first_s, since);
      r.last_s = std::max(r.last_s, since);
      if (const auto pause = between(line, "serving again ", " ms after", at); !pause.empty())
        r.longest_rank_pause_ms = std::max(r.longest_rank_pause_ms, std::stoll(pause));
    }
  }
  std::vector<ep_reform> out;
  for (auto& [epoch, r] : by_epoch) out.push_back(r);
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.first_s < b.first_s; });
  return out;
}

} // namespace supernode::apps
