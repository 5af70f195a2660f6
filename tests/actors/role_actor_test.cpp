// Role actors over every plane: an echo instance hosted by a CAF actor system (in this process
// over inproc, or in a child process started from the real binary), talked to by a probe
// endpoint in the test.

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/protocol/type_ids.hpp"
#include "actors/role/role_actor.hpp"
#include "services/echo/echo_service.hpp"
#include "services/role_registry.hpp"
#include "transport/control_messages.hpp"
#include "transport/plane_factory.hpp"
#include "../transport/inbox.hpp"

using namespace supernode;
using namespace supernode::transport;
using namespace std::chrono_literals;
using supernode::testing::inbox;

namespace {

struct test_system_config : caf::actor_system_config {
  test_system_config() { add_message_types<caf::id_block::supernode>(); }
};

std::string config_text(const std::string& cluster, const std::string& planes) {
  return "[cluster]\nname = \"" + cluster + "\"\nrun_dir = \"/tmp/" + cluster +
         "\"\nheartbeat_ms = 50\nmissed_heartbeats = 6\n" + planes +
         "\n[process.echo]\nroles = [\"echo\"]\n[process.probe]\nroles = [\"probe\"]\n";
}

// Sends one of every application message through `flow` and checks the replies.
void exchange_every_message(endpoint& probe, inbox& in, const std::string& flow) {
  const size_t before_pongs = in.count<pong>(), before_acks = in.count<bulk_ack>();
  ping p{7, 123, std::vector<char>(100, 'p')};
  ASSERT_EQ(probe.send(flow, "echo-0", make_envelope(p)), send_status::ok);
  ASSERT_TRUE(in.wait_for([&] { return in.count<pong>() > before_pongs; }));
  // A 64 MiB transfer with a known pattern, acknowledged with its checksum.
  bulk_chunk c;
  c.transfer_id = 99;
  c.total_bytes = 64u << 20;
  c.data.resize(c.total_bytes);
  for (size_t i = 0; i < c.data.size(); ++i)
    c.data[i] = static_cast<char>(i * 131 + (i >> 12));
  const uint64_t sum = services::fnv1a(c.data.data(), c.data.size());
  ASSERT_EQ(probe.send(flow, "echo-0", make_envelope(std::move(c))), send_status::ok);
  ASSERT_TRUE(in.wait_for([&] { return in.count<bulk_ack>() > before_acks; }, 60s));
  std::lock_guard lock(in.m);
  for (auto& [from, m] : in.messages) {
    if (auto* a = m.get<bulk_ack>()) {
      EXPECT_EQ(from, "echo-0");
      EXPECT_EQ(a->received_bytes, 64u << 20);
      EXPECT_EQ(a->checksum, sum);
    }
    if (auto* q = m.get<pong>()) {
      EXPECT_EQ(q->seq, 7u);
      EXPECT_EQ(q->payload, p.payload);
    }
  }
}

} // namespace

TEST(role_actor, echo_instance_over_inproc_in_one_process) {
  auto cluster = cluster_config::parse(config_text("role-inproc", "[planes.local]\nkind = \"inproc\"\n"),
                                       "inproc.toml");
  test_system_config cfg;
  caf::actor_system sys{cfg};
  auto ep = std::make_shared<endpoint>(cluster, "echo-0", make_plane, 1);
  auto echo = sys.spawn(actors::role_behavior, ep,
                        std::shared_ptr<services::role_logic>(services::make_role_logic("echo")));
  endpoint probe(cluster, "probe-0", make_plane, 2);
  inbox in;
  in.attach(probe);
  probe.start();
  exchange_every_message(probe, in, "control");
  // The echo actor stopping is seen by the probe: it announces that it leaves.
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
  ASSERT_TRUE(in.wait_for([&] {
    for (auto& e : in.events)
      if (e.peer == "echo-0" && e.what == membership_event::kind::left)
        return true;
    return false;
  }));
  EXPECT_EQ(probe.send("control", "echo-0", make_envelope(ping{})), send_status::peer_down);
}

TEST(role_actor, unknown_role_is_a_clear_error) {
  try {
    services::make_role_logic("oracle");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("role 'oracle'"), std::string::npos);
  }
}
