// Role actors over every plane: an echo instance hosted by a CAF actor system (in this process
// over inproc, or in a child process started from the real binary), talked to by a probe
// endpoint in the test.

#include "../support/child_process.hpp"
#include "../support/probe_endpoint.hpp"
#include "../transport/inbox.hpp"
#include "actors/protocol/type_ids.hpp"
#include "actors/role/role_actor.hpp"
#include "services/echo/echo_service.hpp"
#include "services/role_registry.hpp"
#include "transport/checksum.hpp"
#include "transport/control_messages.hpp"
#include "transport/plane_factory.hpp"

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace supernode;
using namespace supernode::transport;
using namespace std::chrono_literals;
using supernode::testing::inbox;

namespace {

struct test_system_config : caf::actor_system_config {
  test_system_config() { add_message_types<caf::id_block::supernode>(); }
};

// The liveness bound: tests of a killed peer keep it short (their point is how soon it is
// seen); the others tolerate a loaded machine, where a 64 MiB transfer queued ahead of the
// heartbeats on one ring once held them back past 300 ms.
enum class liveness { short_bound, tolerant };

std::string config_text(const std::string& cluster, const std::string& planes,
                        liveness bound = liveness::tolerant) {
  const char* missed = bound == liveness::short_bound ? "6" : "40";
  return "[cluster]\nname = \"" + cluster + "\"\nrun_dir = \"/tmp/" + cluster +
         "\"\nheartbeat_ms = 50\nmissed_heartbeats = " + missed + "\n" + planes +
         "\n[process.echo]\nroles = [\"echo\"]\n[process.probe]\nroles = [\"probe\"]\n";
}

// The test's own instance, and what it receives.
struct probe {
  inbox in;
  supernode::testing::probe_endpoint endpoint;
  transport::endpoint& ep;
  explicit probe(const cluster_config& cluster)
      : endpoint(cluster, "probe-0", [this](transport::endpoint& e) { in.attach(e); }),
        ep(endpoint.ep) {}
};

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
  std::vector<char> data(c.total_bytes);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + (i >> 12));
  const uint64_t sum = transport::fnv1a(data.data(), data.size());
  c.data = std::move(data);
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
  auto cluster = cluster_config::parse(
      config_text("role-inproc", "[planes.local]\nkind = \"inproc\"\n"), "inproc.toml");
  test_system_config cfg;
  caf::actor_system sys{cfg};
  auto ep = std::make_shared<endpoint>(cluster, "echo-0", make_plane, 1);
  services::role_context context{cluster.instance("echo-0"), cluster, {}};
  auto echo = actors::spawn_role(sys, ep, services::make_role(context));
  probe p(cluster);
  auto& in = p.in;
  exchange_every_message(p.ep, in, "control");
  // The echo actor stopping is seen by the probe: it announces that it leaves.
  caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
  ASSERT_TRUE(in.wait_for([&] {
    for (auto& e : in.events)
      if (e.peer == "echo-0" && e.what == membership_event::kind::left) return true;
    return false;
  }));
  EXPECT_EQ(p.ep.send("control", "echo-0", make_envelope(ping{})), send_status::peer_down);
}

TEST(role_actor, unknown_role_is_a_clear_error) {
  try {
    auto cluster = cluster_config::parse("[process.x]\nroles = [\"oracle\"]\n", "oracle.toml");
    services::make_role({cluster.instance("oracle-0"), cluster, {}});
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("role 'oracle'"), std::string::npos);
  }
}

namespace {

// The echo process of `config` started from the real binary, and a probe endpoint here.
struct two_process_cluster {
  std::filesystem::path config_file;
  cluster_config cluster;
  std::unique_ptr<supernode::testing::child_process> child;
  std::unique_ptr<probe> prober;

  two_process_cluster(const std::string& name, const std::string& planes, liveness bound) {
    std::filesystem::create_directories("/tmp/" + name);
    config_file = std::filesystem::path("/tmp/" + name) / "cluster.toml";
    std::ofstream(config_file) << config_text(name, planes, bound);
    cluster = cluster_config::load(config_file);
    child = std::make_unique<supernode::testing::child_process>(
        std::vector<std::string>{std::string(SUPERNODE_BINARY_DIR) + "/apps/supernode", "role",
                                 "echo", "--config", config_file.string(), "--id", "0"});
    auto ready = child->wait_for_line("ready", 20s);
    if (!ready) throw std::runtime_error("echo process did not get ready");
    prober = std::make_unique<probe>(cluster);
  }
  ~two_process_cluster() {
    prober.reset();
    child.reset();
    std::filesystem::remove_all(config_file.parent_path());
  }
};

bool saw_down(inbox& in, const std::string& peer) {
  for (auto& e : in.events)
    if (e.peer == peer && e.what == membership_event::kind::down) return true;
  return false;
}

void two_process_round_trips(const std::string& name, const std::string& planes) {
  two_process_cluster c(name, planes, liveness::tolerant);
  exchange_every_message(c.prober->ep, c.prober->in, "control");
  // A clean stop is announced: the probe sees the echo instance leave.
  c.child->signal(SIGTERM);
  ASSERT_TRUE(c.child->wait(10s));
  auto& in = c.prober->in;
  ASSERT_TRUE(in.wait_for([&] {
    for (auto& e : in.events)
      if (e.peer == "echo-0" && e.what != membership_event::kind::joined) return true;
    return false;
  }));
}

void peer_killed_mid_transfer(const std::string& name, const std::string& planes) {
  two_process_cluster c(name, planes, liveness::short_bound);
  // Start a long transfer, and a request that waits for its acknowledgement.
  std::promise<std::string> outcome;
  auto id =
      c.prober->ep.pending().add("echo-0", std::chrono::steady_clock::now() + 60s,
                                 [&](std::optional<envelope> reply, const std::string& error) {
                                   outcome.set_value(reply ? "reply" : error);
                                 });
  ASSERT_TRUE(id);
  bulk_chunk chunk{1, 0, 64u << 20, std::vector<char>(16u << 20, 'k')};
  for (int i = 0; i < 3; ++i) {
    chunk.offset = i * (16u << 20);
    c.prober->ep.send("control", "echo-0", make_envelope(chunk));
  }
  const auto killed_at = std::chrono::steady_clock::now();
  c.child->signal(SIGKILL);
  ASSERT_TRUE(c.child->wait(10s));
  // Liveness: the probe declares echo-0 down within the heartbeat bound even with no
  // connection event (50 ms × 6 missed, plus one tick), and fails the waiting request.
  auto f = outcome.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_NE(f.get().find("echo-0 is down"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - killed_at, 2s);
  // The endpoint fails pending requests before it reports the event: wait for the report.
  auto& in = c.prober->in;
  EXPECT_TRUE(in.wait_for([&] { return saw_down(in, "echo-0"); }));
  EXPECT_EQ(c.prober->ep.send("control", "echo-0", make_envelope(ping{})), send_status::peer_down);
}

// After the cluster stops, nothing of it is left in /dev/shm, even of a SIGKILLed process.
void expect_no_segments_left(const std::string& cluster) {
  for (auto& e : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_EQ(e.path().filename().string().find(cluster), std::string::npos) << e.path();
}

constexpr const char* zmq_planes = "[planes.vpc]\nkind = \"zmq\"\n[flows]\ndefault = \"vpc\"\n";
constexpr const char* shm_planes =
    "[planes.ub]\nkind = \"shm\"\n[planes.vpc]\nkind = \"zmq\"\n[flows]\ndefault = \"ub\"\n";

} // namespace

TEST(role_actor, echo_process_over_zmq) {
  two_process_round_trips("sn-role-zmq-" + std::to_string(::getpid()), zmq_planes);
}

TEST(role_actor, echo_process_over_shm) {
  const std::string cluster = "sn-role-shm-" + std::to_string(::getpid());
  two_process_round_trips(cluster, shm_planes);
  expect_no_segments_left(cluster);
}

TEST(role_actor, killed_peer_is_down_and_its_requests_fail_over_zmq) {
  peer_killed_mid_transfer("sn-kill-zmq-" + std::to_string(::getpid()), zmq_planes);
}

TEST(role_actor, killed_peer_is_down_and_its_requests_fail_over_shm) {
  const std::string cluster = "sn-kill-shm-" + std::to_string(::getpid());
  peer_killed_mid_transfer(cluster, shm_planes);
  expect_no_segments_left(cluster);
}
