#include "services/loadgen/prometheus_text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace supernode::services::loadgen {

namespace {

bool name_char(char c, bool first) {
  const auto u = static_cast<unsigned char>(c);
  return std::isalpha(u) || c == '_' || c == ':' || (!first && std::isdigit(u));
}

void skip_blanks(std::string_view line, size_t& at) {
  while (at < line.size() && (line[at] == ' ' || line[at] == '\t')) ++at;
}

std::optional<std::string> read_name(std::string_view line, size_t& at) {
  const size_t start = at;
  while (at < line.size() && name_char(line[at], at == start)) ++at;
  if (at == start) return std::nullopt;
  return std::string(line.substr(start, at - start));
}

// A quoted label value from the opening quote on, with \\, \" and \n unescaped.
std::optional<std::string> read_quoted(std::string_view line, size_t& at) {
  if (at >= line.size() || line[at] != '"') return std::nullopt;
  std::string out;
  for (++at; at < line.size(); ++at) {
    const char c = line[at];
    if (c == '"') {
      ++at;
      return out;
    }
    if (c == '\\' && at + 1 < line.size()) {
      const char e = line[++at];
      out += e == 'n' ? '\n' : e;
    } else {
      out += c;
    }
  }
  return std::nullopt; // no closing quote
}

// `{a="x",b="y"}` from the brace on (a trailing comma allowed, as the format does).
std::optional<metric_labels> read_labels(std::string_view line, size_t& at) {
  metric_labels out;
  ++at; // '{'
  for (;;) {
    skip_blanks(line, at);
    if (at < line.size() && line[at] == '}') {
      ++at;
      return out;
    }
    auto key = read_name(line, at);
    skip_blanks(line, at);
    if (!key || at >= line.size() || line[at] != '=') return std::nullopt;
    ++at;
    skip_blanks(line, at);
    auto value = read_quoted(line, at);
    if (!value) return std::nullopt;
    out.emplace_back(std::move(*key), std::move(*value));
    skip_blanks(line, at);
    if (at < line.size() && line[at] == ',') ++at;
  }
}

std::optional<double> read_value(std::string_view token) {
  if (token == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (token == "+Inf" || token == "Inf") return std::numeric_limits<double>::infinity();
  if (token == "-Inf") return -std::numeric_limits<double>::infinity();
  double v = 0;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return v;
}

std::optional<metric_sample> read_sample(std::string_view line) {
  size_t at = 0;
  skip_blanks(line, at);
  if (at >= line.size() || line[at] == '#') return std::nullopt;
  metric_sample s;
  auto name = read_name(line, at);
  if (!name) return std::nullopt;
  s.name = std::move(*name);
  if (at < line.size() && line[at] == '{') {
    auto labels = read_labels(line, at);
    if (!labels) return std::nullopt;
    s.labels = std::move(*labels);
  }
  if (at >= line.size() || (line[at] != ' ' && line[at] != '\t')) return std::nullopt;
  skip_blanks(line, at);
  size_t end = at;
  while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
  auto value = read_value(line.substr(at, end - at));
  if (!value) return std::nullopt;
  s.value = *value;
  return s;
}

bool carries(const metric_sample& s, const std::string& name, const metric_labels& want) {
  if (s.name != name) return false;
  return std::all_of(want.begin(), want.end(), [&](const auto& label) {
    return std::find(s.labels.begin(), s.labels.end(), label) != s.labels.end();
  });
}

} // namespace

std::vector<metric_sample> parse_prometheus_text(std::string_view text) {
  std::vector<metric_sample> out;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    auto line = text.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (auto s = read_sample(line)) out.push_back(std::move(*s));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return out;
}

std::optional<double> metrics_snapshot::value(const std::string& name,
                                              const metric_labels& want) const {
  for (const auto& s : samples_)
    if (carries(s, name, want)) return s.value;
  return std::nullopt;
}

double metrics_snapshot::sum(const std::string& name, const metric_labels& want) const {
  double total = 0;
  for (const auto& s : samples_)
    if (carries(s, name, want)) total += s.value;
  return total;
}

} // namespace supernode::services::loadgen
