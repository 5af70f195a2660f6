#include "apps/bench/model_cache_report.hpp"

#include "apps/bench/bench_report.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace supernode::apps {

namespace {

// Switch hit rates by the paper's definitions: the instances serve N different models and a
// switch goes to any of them. A node's DRAM holds only its own model (a hit 1 time in N); the
// pool holds all of them (here: A and B at once, both whole, and SSD room for N + 2 models).
struct switch_model {
  double local_hit = 0, ems_hit = 0;
  double avg_no_cache = 0, avg_local = 0, avg_ems = 0; // average switch latency, s
};

switch_model switch_model_of(const model_cache_setup& s, const model_cache_results& r) {
  switch_model m;
  m.local_hit = 1.0 / s.instances;
  m.ems_hit = r.pool_holds_both ? 1.0 : 0.0;
  m.avg_no_cache = r.switch_no_cache.last;
  m.avg_local = m.local_hit * r.local_warm_s + (1 - m.local_hit) * r.switch_no_cache.last;
  m.avg_ems = m.ems_hit * r.switch_ems.last + (1 - m.ems_hit) * r.switch_no_cache.last;
  return m;
}

nlohmann::json switch_json(const model_cache_results& r, const switch_model& m) {
  nlohmann::json sw;
  sw["no_cache_s"] = r.switch_no_cache.last;
  sw["no_cache_bucket_bytes_read"] = r.switch_no_cache.bucket_bytes;
  sw["ems_s"] = r.switch_ems.last;
  sw["ems_pool_bytes_read"] = r.switch_ems.pool_bytes;
  sw["ems_bucket_bytes_read"] = r.switch_ems.bucket_bytes;
  sw["prefetch_b_s"] = r.prefetch_b_s; // bucket -> pool, one model, before the switch
  sw["local_dram_hit_s"] = r.local_warm_s;
  sw["pool_bytes_with_a_and_b"] = r.pool_bytes_ab;
  sw["pool_holds_a_and_b"] = r.pool_holds_both;
  sw["hit_rate"] = {{"no_cache", 0.0}, {"local_dram", m.local_hit}, {"ems", m.ems_hit}};
  sw["hit_rate_basis"] = "N instances serving N models, a switch to any one of them: local DRAM "
                         "holds the node's own model (1/N), the pool holds every model (measured: "
                         "A and B both whole in the pool)";
  sw["average_s"] = {{"no_cache", m.avg_no_cache}, {"local_dram", m.avg_local}, {"ems", m.avg_ems}};

  return sw;
}

nlohmann::json report_json(const model_cache_setup& s, const model_cache_results& r) {
  const double m = static_cast<double>(s.model_bytes);
  nlohmann::json out;
  out["what"] = "cold/warm start = OBS->DRAM: the model's files byte-identical in the instance's "
                "local folder; weights not parsed, no DRAM->NPU";
  out["model"] = {
      {"dir", s.model_dir.string()}, {"id", s.id}, {"bytes", s.model_bytes}, {"files", s.files}};
  out["bucket"] = {{"folder", s.bucket.string()},
                   {"bandwidth_bytes_per_s", s.bandwidth},
                   {"one_model_s", m / s.bandwidth},
                   {"n_models_s", m * s.instances / s.bandwidth}};
  out["instances"] = s.instances;
  out["pool"] = {{"servers", 2},
                 {"dram_bytes_per_server", s.dram_bytes},
                 {"ssd_bytes_per_server", s.ssd_bytes},
                 {"read_path", "ub"}};

  auto& nc = out["no_cache"] = to_json(r.no_cache, false);
  nc["warm_start_s"] = nullptr;
  nc["dram_overhead_bytes"] = 0;

  auto& ld = out["local_dram"];
  ld["cold_start_s"] = r.no_cache.last; // an empty local cache: the no-cache run itself
  ld["cold_start_mean_s"] = r.no_cache.mean;
  ld["cold_start_note"] = "the no-cache run: on a cold start the local cache is empty";
  ld["bucket_bytes_read"] = r.no_cache.bucket_bytes;
  ld["warm_start_s"] = r.local_warm_s;
  ld["dram_overhead_bytes"] = static_cast<uint64_t>(s.instances) * s.model_bytes;
  ld["dram_overhead_models"] = s.instances;

  auto& e = out["ems"] = to_json(r.ems_cold, true);
  e["warm_start_s"] = r.ems_warm.last;
  e["warm_pool_bytes_read"] = r.ems_warm.pool_bytes;
  e["warm_bucket_bytes_read"] = r.ems_warm.bucket_bytes;
  e["dram_overhead_bytes"] = r.pool_bytes_a; // the model's blocks the pool holds, listed
  e["dram_overhead_models"] = static_cast<double>(r.pool_bytes_a) / m;
  e["pool_holds_whole_model"] = r.pool_complete_a;

  out["switch"] = switch_json(r, switch_model_of(s, r));
  auto& ratio = out["ratios"];
  ratio["cold_start_no_cache_over_ems"] = r.no_cache.last / r.ems_cold.last;
  ratio["cold_start_mean_no_cache_over_ems"] = r.no_cache.mean / r.ems_cold.mean;
  ratio["bucket_bytes_no_cache_over_ems"] =
      static_cast<double>(r.no_cache.bucket_bytes) / static_cast<double>(r.ems_cold.bucket_bytes);
  ratio["dram_overhead_local_over_ems"] =
      static_cast<double>(s.instances) * m /
      static_cast<double>(std::max<uint64_t>(1, r.pool_bytes_a));
  ratio["switch_no_cache_over_ems"] = r.switch_no_cache.last / r.switch_ems.last;

  return out;
}

// Table 2's rows.
void print_table(const model_cache_setup& s, const model_cache_results& r) {
  const double m = static_cast<double>(s.model_bytes);
  const auto sw = switch_model_of(s, r);
  std::fprintf(stderr,
               "\nModel caching (Table 2): %s, %s, %d instances, bucket %.3g B/s (one model %.2f "
               "s, %d models %.2f s at the cap)\nloaded = OBS->local DRAM copy; weights not "
               "parsed, no DRAM->NPU\n\n",
               s.id.c_str(), gb(m).c_str(), s.instances, s.bandwidth, m / s.bandwidth, s.instances,
               m * s.instances / s.bandwidth);
  std::fprintf(stderr, "| %-28s | %-16s | %-16s | %-16s |\n", "", "No cache", "Local DRAM", "EMS");
  std::fprintf(stderr, "|%s|%s|%s|%s|\n", std::string(30, '-').c_str(),
               std::string(18, '-').c_str(), std::string(18, '-').c_str(),
               std::string(18, '-').c_str());
  const auto row = [](const char* what, const std::string& a, const std::string& b,
                      const std::string& c) {
    std::fprintf(stderr, "| %-28s | %-16s | %-16s | %-16s |\n", what, a.c_str(), b.c_str(),
                 c.c_str());
  };
  const auto sec = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f s", v);
    return std::string(buf);
  };
  const auto pct = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", v * 100);
    return std::string(buf);
  };
  const auto times = [&](double v) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.2gx (%s)", v, gb(v * m).c_str());
    return std::string(buf);
  };
  row("cold start, last (OBS->DRAM)", sec(r.no_cache.last), sec(r.no_cache.last),
      sec(r.ems_cold.last));
  row("cold start, mean", sec(r.no_cache.mean), sec(r.no_cache.mean), sec(r.ems_cold.mean));
  row("bucket bytes, cold start", gb(static_cast<double>(r.no_cache.bucket_bytes)),
      gb(static_cast<double>(r.no_cache.bucket_bytes)),
      gb(static_cast<double>(r.ems_cold.bucket_bytes)));
  row("warm start", "n/a", sec(r.local_warm_s), sec(r.ems_warm.last));
  row("DRAM overhead", "0", times(s.instances), times(static_cast<double>(r.pool_bytes_a) / m));
  row("switch hit rate", pct(0), pct(sw.local_hit), pct(sw.ems_hit));
  row("switch latency, hit / miss", "- / " + sec(r.switch_no_cache.last),
      sec(r.local_warm_s) + " / " + sec(r.switch_no_cache.last), sec(r.switch_ems.last) + " / -");
  row("average switch latency", sec(sw.avg_no_cache), sec(sw.avg_local), sec(sw.avg_ems));
  std::fprintf(stderr, "\ncold start no cache / EMS: %.2fx; bucket bytes no cache / EMS: %.2fx\n",
               r.no_cache.last / r.ems_cold.last,
               static_cast<double>(r.no_cache.bucket_bytes) /
                   static_cast<double>(r.ems_cold.bucket_bytes));
}

} // namespace

void report_model_cache(const model_cache_setup& setup, const model_cache_results& r,
                        const std::optional<std::string>& json_file) {
  emit_report(report_json(setup, r).dump(2) + "\n", json_file);
  print_table(setup, r);
}

} // namespace supernode::apps
