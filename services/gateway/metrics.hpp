#pragma once
// Counters, gauges and histograms for GET /metrics, rendered in the Prometheus text exposition
// format 0.0.4. Families appear on first use, so the gateway needs no registration step; a family
// keeps the type (and, for histograms, the bucket bounds) it was created with.

#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace supernode::services::gateway {

using labels = std::vector<std::pair<std::string, std::string>>;

// Bucket upper bounds, in seconds, wide enough for time-to-first-token (milliseconds to a minute
// under load) and fine enough at the low end for time-per-output-token.
inline constexpr double latency_buckets_seconds[] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60};

// Thread-safe. Names must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*;
// using a name with another type, a histogram with other bounds or a negative counter delta
// throws std::invalid_argument.
class metrics_registry {
public:
  void add_counter(const std::string& name, const std::string& help, double delta,
                   const labels& l = {});
  void set_gauge(const std::string& name, const std::string& help, double value,
                 const labels& l = {});
  // Buckets are cumulative (le="+Inf" included), with _sum and _count.
  void observe(const std::string& name, const std::string& help,
               std::span<const double> bucket_bounds, double value, const labels& l = {});

  // Families by name, series by label set, both sorted, so the output is deterministic.
  std::string render() const;

private:
  enum class metric_type { counter, gauge, histogram };
  struct series {
    double value = 0;                    // counter, gauge
    std::vector<uint64_t> bucket_counts; // histogram: per bound, not cumulative
    uint64_t count = 0;
    double sum = 0;
  };
  struct family {
    metric_type type;
    std::string help;
    std::vector<double> bounds;
    std::map<labels, series> by_labels;
  };

  series& series_for(const std::string& name, const std::string& help, metric_type type,
                     const labels& l);

  mutable std::mutex mutex_;
  std::map<std::string, family> families_;
};

} // namespace supernode::services::gateway
