#pragma once
// Reading a Prometheus text exposition (what GET /metrics answers): `name{label="v",...} value`
// lines, for the benchmarks and tests that watch a server's counters.

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace supernode::services::loadgen {

using metric_labels = std::vector<std::pair<std::string, std::string>>;

struct metric_sample {
  std::string name;
  metric_labels labels; // in the order written, values unescaped
  double value = 0;
};

// The samples of `text`, in order. Comments (# HELP, # TYPE), blank lines and lines that are not
// samples are skipped; a trailing timestamp is ignored; NaN, +Inf and -Inf are read as such.
std::vector<metric_sample> parse_prometheus_text(std::string_view text);

// One scrape, looked up by metric name and labels.
class metrics_snapshot {
public:
  explicit metrics_snapshot(std::string_view text) : samples_(parse_prometheus_text(text)) {}

  // The first sample named `name` that carries every label of `want` (and any others);
  // nothing when none does.
  std::optional<double> value(const std::string& name, const metric_labels& want = {}) const;
  // The sum over every sample named `name` that carries every label of `want`; 0 when none.
  double sum(const std::string& name, const metric_labels& want = {}) const;

  const std::vector<metric_sample>& samples() const { return samples_; }

private:
  std::vector<metric_sample> samples_;
};

} // namespace supernode::services::loadgen
