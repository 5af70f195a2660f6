#pragma once
// One cluster of a benchmark (`bench cache`'s sweep, `bench scale`'s runs): its config written
// to a fresh run folder, brought up with `supernode cluster up` and always taken down with
// `cluster down` (on destruction, or by the stop-signal watcher when the bench is interrupted).
// What the cluster commands print goes to stderr, prefixed with `label`.

#include "apps/bench/stop_signals.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace supernode::apps {

class cache_bench_cluster {
public:
  cache_bench_cluster(const std::filesystem::path& run_dir, const std::string& config_text,
                      const std::filesystem::path& model, std::string label = "bench cache");
  ~cache_bench_cluster();
  cache_bench_cluster(const cache_bench_cluster&) = delete;
  cache_bench_cluster& operator=(const cache_bench_cluster&) = delete;

  // Starts every process; returns the gateway's HTTP port. Throws when `cluster up` fails.
  uint16_t up();
  // The sweep on this cluster finished: its folder can go (a failed one keeps its logs).
  void succeeded() { ok_ = true; }
  const std::filesystem::path& config_file() const { return config_; }

private:
  void down() const;
  void print_line(const std::string& line) const;

  std::filesystem::path run_dir_, model_, config_;
  std::string label_;
  std::unique_ptr<on_stop_signal> down_on_signal_;
  bool started_ = false, ok_ = false;
};

} // namespace supernode::apps
