#pragma once
// An EMS pool hosted in this process over the inproc plane for unit tests: an MP controller
// and `servers` MP servers (mp_server-0, -1, ...), each a role that a test may stop or replace,
// and a client on a pool session of its own ("probe-0"). A test may start fewer servers than the
// config names and start the others later (servers joining a live pool), and open new clients
// whose first ring is the current one.

#include "../../support/inproc_cluster.hpp"
#include "../../support/role_host.hpp"
#include "services/ems/mp_controller.hpp"
#include "services/ems/mp_server.hpp"
#include "services/ems/pool_session.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace supernode::testing {

// `bytes` bytes that differ per seed.
inline std::vector<std::byte> value_of(size_t bytes, unsigned seed) {
  std::vector<std::byte> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<std::byte>(i * 13 + seed);
  return v;
}

class inproc_pool {
public:
  using controller_host = role_host<services::ems::mp_controller>;
  using server_host = role_host<services::ems::mp_server>;

  // `ems_keys`: lines of the [ems] table beyond the small tiers every test gets.
  inproc_pool(const std::string& name, int servers, const std::string& ems_keys = "",
              int started = -1)
      : config_(name, tables(servers, ems_keys)) {
    start_controller(3);
    servers_.resize(static_cast<size_t>(servers));
    for (int i = 0; i < (started < 0 ? servers : started); ++i) start_server(i);
    session_ = std::make_unique<services::ems::pool_session>(cluster(), "probe-0", 5, ems());
  }

  void start_server(int i) {
    const auto instance = "mp_server-" + std::to_string(i);
    servers_.at(static_cast<size_t>(i)) = std::make_unique<server_host>(
        cluster(), instance,
        std::make_shared<services::ems::mp_server>(cluster(), instance, ems()));
  }
  server_host& server(int i) { return *servers_.at(static_cast<size_t>(i)); }
  // A client on a session of its own (probe-1, probe-2, ...): it has seen no earlier ring, so
  // it reads every key at its owner only.
  std::unique_ptr<services::ems::pool_session> new_session() {
    return std::make_unique<services::ems::pool_session>(
        cluster(), "probe-" + std::to_string(++sessions_), 5, ems());
  }

  const transport::cluster_config& cluster() const { return config_.file.cluster; }
  const services::ems::ems_config& ems() const { return config_.file.serving.ems; }
  services::ems::ems_client& client() { return session_->client(); }
  transport::endpoint& client_endpoint() { return session_->endpoint(); }
  controller_host& controller() { return *controller_; }
  std::vector<std::string> server_names() const {
    std::vector<std::string> names;
    for (int i = 0; i < static_cast<int>(servers_.size()); ++i)
      names.push_back("mp_server-" + std::to_string(i));
    return names;
  }

  // A new controller process: the old one gone without a word, the new one with a new
  // incarnation (the servers see it join) and nothing but what the servers tell it.
  void stop_controller() { controller_.reset(); }
  void start_controller(uint64_t incarnation) {
    controller_ = std::make_unique<controller_host>(
        cluster(), "mp_controller-0",
        std::make_shared<services::ems::mp_controller>(cluster(), ems()), incarnation);
  }
  // The server gone without a word (as if killed): clients' rings still name it.
  void kill_server(const std::string& instance) {
    for (int i = 0; i < static_cast<int>(servers_.size()); ++i)
      if ("mp_server-" + std::to_string(i) == instance) servers_[i].reset();
  }

private:
  static std::string tables(int servers, const std::string& ems_keys) {
    return "[process.ems_controller]\nroles = [\"mp_controller\"]\n"
           "[process.ems]\nroles = [\"mp_server\"]\ncount = " +
           std::to_string(servers) +
           "\n[process.probe]\nroles = [\"probe\"]\ncount = 6\n"
           "[ems]\ndram_bytes = 8388608\nssd_bytes = 268435456\ntimeout_ms = 2000\n" +
           ems_keys;
  }

  inproc_cluster_file config_;
  std::unique_ptr<controller_host> controller_;
  std::vector<std::unique_ptr<server_host>> servers_;
  std::unique_ptr<services::ems::pool_session> session_;
  int sessions_ = 0;
};

} // namespace supernode::testing
