#include "services/gateway/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace supernode::services::gateway {

namespace {

bool valid_name(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':');
    const bool digit = c >= '0' && c <= '9';
    if (!letter && !(digit && i > 0)) return false;
  }
  return true;
}

labels sorted_labels(const labels& l) {
  labels out = l;
  std::sort(out.begin(), out.end());
  for (size_t i = 0; i < out.size(); ++i) {
    if (!valid_name(out[i].first, false) || out[i].first.starts_with("__"))
      throw std::invalid_argument("metrics: invalid label name \"" + out[i].first + "\"");
    if (out[i].first == "le")
      throw std::invalid_argument("metrics: the label name \"le\" is reserved for buckets");
    if (i > 0 && out[i].first == out[i - 1].first)
      throw std::invalid_argument("metrics: duplicate label \"" + out[i].first + "\"");
  }
  return out;
}

// Shortest text that reads back as the same double, Prometheus' spelling for the special values.
std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec; // 64 bytes always hold the shortest form of a double
  return std::string(buf, end);
}

std::string escape(std::string_view s, bool quotes) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else if (c == '"' && quotes)
      out += "\\\"";
    else
      out += c;
  }
  return out;
}

// {a="x",b="y"} (or nothing without labels); `le` comes last, as Prometheus clients write it.
std::string label_text(const labels& l, const std::string* le = nullptr) {
  if (l.empty() && !le) return "";
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : l) {
    if (!first) out += ',';
    first = false;
    out += key + "=\"" + escape(value, true) + "\"";
  }
  if (le) {
    if (!first) out += ',';
    out += "le=\"" + *le + "\"";
  }
  return out + "}";
}

void append_sample(std::string& out, const std::string& name, const std::string& labels_text,
                   double value) {
  out += name;
  out += labels_text;
  out += ' ';
  out += format_value(value);
  out += '\n';
}

} // namespace

metrics_registry::series& metrics_registry::series_for(const std::string& name,
                                                       const std::string& help, metric_type type,
                                                       const labels& l) {
  if (!valid_name(name, true))
    throw std::invalid_argument("metrics: invalid metric name \"" + name + "\"");
  labels key = sorted_labels(l);
  auto [it, created] = families_.try_emplace(name, family{type, help, {}, {}});
  if (!created && it->second.type != type)
    throw std::invalid_argument("metrics: \"" + name + "\" already exists with another type");
  return it->second.by_labels[std::move(key)];
}

void metrics_registry::add_counter(const std::string& name, const std::string& help, double delta,
                                   const labels& l) {
  if (!(delta >= 0))
    throw std::invalid_argument("metrics: counter \"" + name + "\" cannot decrease");
  std::lock_guard lock(mutex_);
  series_for(name, help, metric_type::counter, l).value += delta;
}

void metrics_registry::set_gauge(const std::string& name, const std::string& help, double value,
                                 const labels& l) {
  std::lock_guard lock(mutex_);
  series_for(name, help, metric_type::gauge, l).value = value;
}

void metrics_registry::observe(const std::string& name, const std::string& help,
                               std::span<const double> bucket_bounds, double value,
                               const labels& l) {
  // +Inf is always rendered, so a caller's trailing +Inf bound is the same bucket.
  if (!bucket_bounds.empty() && std::isinf(bucket_bounds.back()) && bucket_bounds.back() > 0)
    bucket_bounds = bucket_bounds.first(bucket_bounds.size() - 1);
  for (size_t i = 0; i < bucket_bounds.size(); ++i) {
    if (!std::isfinite(bucket_bounds[i]) || (i > 0 && bucket_bounds[i] <= bucket_bounds[i - 1]))
      throw std::invalid_argument("metrics: histogram \"" + name +
                                  "\" bounds must be finite and increasing");
  }
  std::lock_guard lock(mutex_);
  // Checked before series_for creates anything, so a rejected call leaves no empty series.
  const auto existing = families_.find(name);
  if (existing != families_.end() && existing->second.type == metric_type::histogram &&
      !std::equal(existing->second.bounds.begin(), existing->second.bounds.end(),
                  bucket_bounds.begin(), bucket_bounds.end()))
    throw std::invalid_argument("metrics: histogram \"" + name + "\" has other bucket bounds");
  series& s = series_for(name, help, metric_type::histogram, l);
  std::vector<double>& bounds = families_.at(name).bounds;
  if (existing == families_.end()) bounds.assign(bucket_bounds.begin(), bucket_bounds.end());
  if (s.bucket_counts.empty()) s.bucket_counts.assign(bounds.size(), 0);
  // A value equal to a bound belongs to that bucket (le = "less or equal").
  const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), value) - bounds.begin();
  if (bucket < bounds.size()) ++s.bucket_counts[bucket];
  ++s.count;
  s.sum += value;
}

std::string metrics_registry::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& [name, fam] : families_) {
    static constexpr const char* type_names[] = {"counter", "gauge", "histogram"};
    out += "# HELP " + name + " " + escape(fam.help, false) + "\n";
    out += "# TYPE " + name + " " + type_names[static_cast<int>(fam.type)] + "\n";
    for (const auto& [key, s] : fam.by_labels) {
      if (fam.type != metric_type::histogram) {
        append_sample(out, name, label_text(key), s.value);
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < fam.bounds.size(); ++i) {
        cumulative += s.bucket_counts[i];
        const std::string le = format_value(fam.bounds[i]);
        append_sample(out, name + "_bucket", label_text(key, &le), static_cast<double>(cumulative));
      }
      const std::string inf = "+Inf";
      append_sample(out, name + "_bucket", label_text(key, &inf), static_cast<double>(s.count));
      append_sample(out, name + "_sum", label_text(key), s.sum);
      append_sample(out, name + "_count", label_text(key), static_cast<double>(s.count));
    }
  }
  return out;
}

} // namespace supernode::services::gateway
