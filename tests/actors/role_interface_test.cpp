// Every role is a typed actor over its interface: a message outside it never reaches the role's
// logic, and is counted (per instance and type, up to /metrics) and logged once per type with
// its sender and the role.

#include "../model/tiny_model.hpp"
#include "../support/eventually.hpp"
#include "../support/http_client.hpp"
#include "../support/probe_endpoint.hpp"
#include "../support/test_run_dir.hpp"
#include "actors/protocol/type_ids.hpp"
#include "actors/role/role_actor.hpp"
#include "services/gateway/gateway_service.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/serving/cluster_file.hpp"
#include "transport/control_messages.hpp"
#include "transport/plane_factory.hpp"

#include <chrono>
#include <filesystem>
#include <future>
#include <gtest/gtest.h>
#include <sstream>
#include <thread>
#include <unistd.h>

using supernode::testing::eventually;
using namespace supernode;
using namespace std::chrono_literals;

namespace {

struct test_system_config : caf::actor_system_config {
  test_system_config() { add_message_types<caf::id_block::supernode>(); }
};

const std::vector<std::string> roles = {"echo",   "gateway",       "scheduler", "prefill",
                                        "decode", "mp_controller", "mp_server"};

std::string config_text(const supernode::testing::test_run_dir& dir) {
  std::string all;
  for (auto& r : roles) all += (all.empty() ? "\"" : ", \"") + r + "\"";
  return "[cluster]\nname = \"" + dir.name() + "\"\nrun_dir = \"" + dir.path().string() +
         "\"\nheartbeat_ms = 50\nmissed_heartbeats = 20\n"
         "[planes.local]\nkind = \"inproc\"\n[flows]\ndefault = \"local\"\n"
         "[process.all]\nroles = [" +
         all + "]\n[process.probe]\nroles = [\"probe\"]\n[model]\npath = \"" +
         supernode::testing::tiny_model_dir().string() +
         "\"\nmax_context = 1024\n[gateway]\nport = 0\n[decode]\nkv_blocks = 64\n"
         "[ems]\ndram_bytes = 16777216\nssd_bytes = 67108864\n";
}

} // namespace

TEST(role_interface, a_message_outside_a_roles_interface_is_counted_logged_once_and_exported) {
  const supernode::testing::test_run_dir dir("iface");
  const auto file = services::cluster_file::parse(config_text(dir), "iface.toml");
  const auto& cluster = file.cluster;
  const auto& serving = file.serving;
  services::protocol::register_serving_messages();

  test_system_config cfg;
  caf::actor_system sys{cfg};
  std::map<std::string, std::shared_ptr<transport::endpoint>> endpoints;
  std::vector<caf::actor> actors;
  std::shared_ptr<services::gateway_service> gateway;
  std::vector<std::future<std::string>> started;
  for (auto& role : roles) {
    const auto instance = role + "-0";
    auto ep = std::make_shared<transport::endpoint>(cluster, instance, transport::make_plane, 1);
    auto made = services::make_role({cluster.instance(instance), cluster, serving});
    if (auto* g = std::get_if<std::shared_ptr<services::gateway_service>>(&made)) gateway = *g;
    auto done = std::make_shared<std::promise<std::string>>();
    started.push_back(done->get_future());
    actors.push_back(
        actors::spawn_role(sys, ep, made, [done](const std::string& e) { done->set_value(e); }));
    endpoints[instance] = ep;
  }
  for (auto& f : started) ASSERT_EQ(f.get(), "");

  supernode::testing::probe_endpoint probe(cluster, "probe-0", [](transport::endpoint&) {});
  ::testing::internal::CaptureStderr();
  // Each role twice: counted twice, logged once. The echo role takes pings, so it gets a
  // serving message instead.
  for (int round = 0; round < 2; ++round)
    for (auto& role : roles) {
      auto m = role == "echo" ? transport::make_envelope(services::protocol::admit_request{})
                              : transport::make_envelope(transport::ping{1, 2, {}});
      ASSERT_EQ(probe.ep.send("control", role + "-0", m), transport::send_status::ok) << role;
    }
  for (auto& role : roles) {
    const std::string type = role == "echo" ? "admit_request" : "ping";
    auto& ep = *endpoints[role + "-0"];
    EXPECT_TRUE(eventually([&] {
      auto counts = ep.unexpected_messages();
      return counts.count(type) && counts[type] == 2;
    })) << role;
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  for (auto& role : roles) {
    const std::string type = role == "echo" ? "admit_request" : "ping";
    std::vector<std::string> lines; // this instance's lines about the unexpected type
    std::istringstream in(log);
    for (std::string line; std::getline(in, line);)
      if (line.find("instance=" + role + "-0 ") != std::string::npos &&
          line.find("unexpected message " + type + " ") != std::string::npos)
        lines.push_back(line);
    ASSERT_EQ(lines.size(), 1u) << "logged once, counted twice: " << log;
    EXPECT_NE(lines[0].find("from probe-0"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find("the " + role + " role"), std::string::npos) << lines[0];
    EXPECT_NE(lines[0].find(" WARN "), std::string::npos) << lines[0];
  }

  // /metrics shows the counts of every role that reports (all of these but echo).
  ASSERT_TRUE(gateway);
  std::string metrics;
  EXPECT_TRUE(eventually([&] {
    metrics = supernode::testing::http_call(gateway->http_port(), "GET", "/metrics").body;
    for (auto& role : roles)
      if (role != "echo" && metrics.find("supernode_unexpected_messages_total{instance=\"" + role +
                                         "-0\",type=\"ping\"} 2") == std::string::npos)
        return false;
    return true;
  })) << metrics;

  for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}
