#pragma once
// A serving cluster for tests, started from a config of configs/ the way a user starts it: the
// embedded shape with `supernode serve`, multi-process shapes with `supernode cluster up`
// (stopped with `cluster down`). Each cluster gets its own name, run folder and a free HTTP
// port, so tests never collide with each other or with a server the user runs.

#include "child_process.hpp"
#include "run_dir_post_mortem.hpp"
#include "sanitizer_slowdown.hpp"
#include "services/cluster/cluster_file.hpp"
#include "test_run_dir.hpp"

#include <array>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <vector>

namespace supernode::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized_build = true;
#else
inline constexpr bool sanitized_build = false;
#endif
// Heartbeats a member may miss before it is declared down: sanitized processes run several
// times slower (ThreadSanitizer 5-15x; four TSan rank processes of one EP group went 5 s without
// a heartbeat on two cores), and a slow process is not a dead one. Unsanitized, 3 s: two
// clusters side by side on two cores saw every process's tick come up to 1.7 s late at once.
#if defined(__SANITIZE_THREAD__)
inline constexpr const char* test_missed_heartbeats = "200";
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr const char* test_missed_heartbeats = "50";
#else
inline constexpr const char* test_missed_heartbeats = "30";
#endif

// Config edits that put both ZeroMQ planes (vpc, rdma) on tcp from `base`: each plane takes 3
// ports per config instance, `ports_per_plane` in all.
inline std::vector<std::array<std::string, 3>> zmq_planes_over_tcp(int base, int ports_per_plane) {
  return {{"planes.vpc", "transport", "\"tcp\""},
          {"planes.vpc", "base_port", std::to_string(base)},
          {"planes.rdma", "transport", "\"tcp\""},
          {"planes.rdma", "base_port", std::to_string(base + ports_per_plane)}};
}

class serving_cluster {
public:
  // `config` is a file under configs/; `edits` are (table, key, value) changes applied to it.
  serving_cluster(const std::string& config, const std::filesystem::path& model,
                  const std::vector<std::array<std::string, 3>>& edits = {}) {
    auto file = services::cluster::cluster_file::read(std::filesystem::path(SUPERNODE_SOURCE_DIR) /
                                                      "configs" / config);
    file.own_cluster(run_dir_.name(), run_dir_.path()).set("gateway", "port", "0");
    // Tests run side by side on two cores and start many processes at once: a process can miss
    // half a second of heartbeats without being dead (five seconds under ASan, which runs every
    // process 2-3x slower: two EP clusters side by side starved a rank's heartbeats past 2 s).
    // Deaths the tests cause are seen sooner anyway (closed sockets, shm owners gone).
    file.set("cluster", "missed_heartbeats", test_missed_heartbeats);
    // The supervisor ends a hung process after three of those bounds (a minute under TSan), and
    // a sanitized restart takes tens of seconds more: requests wait that long for a replacement
    // of a sole instance before they are answered no_prefill_instance.
    if (sanitized_build) file.set("gateway", "recovery_timeout_ms", std::to_string(scaled(30000)));
    for (auto& [table, key, value] : edits) file.set(table, key, value);
    config_ = run_dir_.path() / config;
    file.write(config_);
    const std::string& text = file.text();
    model_ = model.string();

    multi_process_ = text.find("[process.all]") == std::string::npos;
    if (multi_process_) {
      // Owned by this test process: a test killed at its timeout takes its cluster with it.
      child_process up({binary(), "cluster", "up", "--config", config_.string(), "--model", model_,
                        "--owner-pid", std::to_string(::getpid())});
      // Eleven TSan processes of lep took 128 s to come up on two cores.
      auto line = up.wait_for_line("listening gateway-0 ", scaled(std::chrono::seconds(120)));
      auto status = up.wait(scaled(std::chrono::seconds(60)));
      up_ok_ = line && status && status->success();
      if (line) port_ = port_of(*line);
    } else {
      server_ = std::make_unique<child_process>(std::vector<std::string>{
          binary(), "serve", "--config", config_.string(), "--model", model_});
      auto line = server_->wait_for_line("listening gateway-0 ", scaled(std::chrono::seconds(120)));
      up_ok_ = line && server_->wait_for_line("ready", scaled(std::chrono::seconds(60)));
      if (line) port_ = port_of(*line);
    }
  }
  ~serving_cluster() {
    if (multi_process_) {
      child_process down({binary(), "cluster", "down", "--config", config_.string()});
      down.wait(std::chrono::seconds(60));
    } else if (server_) {
      server_->signal(SIGTERM);
      server_->wait(std::chrono::seconds(30));
    }
    // Once the processes are down, so their logs are whole.
    if (::testing::Test::HasFailure()) print_run_dir_post_mortem(run_dir_.path());
  }

  bool up() const { return up_ok_ && port_ != 0; }
  uint16_t port() const { return port_; }
  const std::filesystem::path& run_dir() const { return run_dir_.path(); }
  const std::filesystem::path& config_file() const { return config_; }
  static std::string binary() { return std::string(SUPERNODE_BINARY_DIR) + "/apps/supernode"; }

private:
  static uint16_t port_of(const std::string& line) {
    const auto colon = line.rfind(':');
    return static_cast<uint16_t>(std::stoi(line.substr(colon + 1)));
  }

  test_run_dir run_dir_; // removed after the cluster is down: declared first
  std::string model_;
  std::filesystem::path config_;
  bool multi_process_ = false, up_ok_ = false;
  uint16_t port_ = 0;
  std::unique_ptr<child_process> server_;
};

} // namespace supernode::testing
