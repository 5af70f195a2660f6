// A process that joins a live cluster (`role --join`): it claims a free name, binds ephemeral
// tcp ports, announces them through one config member, learns the other members from that
// member's directory and announces itself to them; members that restart learn it again. Real
// ZeroMQ tcp planes with CurveZMQ keys, endpoints as objects of this process; every wait is a
// condition with a deadline.

#include "../support/eventually.hpp"
#include "inbox.hpp"
#include "transport/control_messages.hpp"
#include "transport/endpoint.hpp"
#include "transport/free_ports.hpp"
#include "transport/instance_claim.hpp"
#include "transport/plane_factory.hpp"

#include <filesystem>
#include <gtest/gtest.h>
#include <unistd.h>

using namespace supernode::transport;
using namespace std::chrono_literals;
using supernode::testing::eventually;
using supernode::testing::inbox;

namespace {

struct join_cluster {
  std::filesystem::path run_dir =
      std::filesystem::temp_directory_path() / ("join-test-" + std::to_string(::getpid()));
  cluster_config config;

  join_cluster() {
    std::filesystem::remove_all(run_dir);
    const int base = free_tcp_port_range(6, 41);
    config =
        cluster_config::parse("[cluster]\nname = \"join-test\"\nrun_dir = \"" + run_dir.string() +
                                  "\"\nheartbeat_ms = 20\nmissed_heartbeats = 5\n"
                                  "[planes.vpc]\nkind = \"zmq\"\ntransport = \"tcp\"\n"
                                  "base_port = " +
                                  std::to_string(base) +
                                  "\n[flows]\ndefault = \"vpc\"\n"
                                  "[process.a]\nroles = [\"alpha\"]\n"
                                  "[process.b]\nroles = [\"beta\"]\n",
                              "join.toml");
  }
  ~join_cluster() { std::filesystem::remove_all(run_dir); }

  // The config as the joining process sees it: itself added.
  cluster_config with_joined(const instance_claim& claim) const {
    auto c = config;
    c.add_joined_instance("a", "alpha", claim.role_index());
    return c;
  }
};

// Ticks every endpoint with the real clock until `condition` holds.
bool ticking_until(std::initializer_list<endpoint*> endpoints,
                   const std::function<bool()>& condition) {
  return eventually([&] {
    for (auto* e : endpoints) e->tick(std::chrono::steady_clock::now());
    return condition();
  });
}

} // namespace

TEST(endpoint_join, a_joined_instance_is_known_to_every_member_and_reachable) {
  join_cluster c;
  inbox beta_mail, joiner_mail; // before the endpoints: their handlers write here until they end
  endpoint alpha(c.config, "alpha-0", make_plane, 100), beta(c.config, "beta-0", make_plane, 200);
  const instance_claim claim(c.config, "alpha");
  ASSERT_EQ(claim.name(), "alpha-1"); // the lowest past the config's alpha-0
  const auto joined_config = c.with_joined(claim);
  endpoint joiner(joined_config, "alpha-1", make_plane, 300);
  joiner.set_join_seeds({{"alpha-0", ""}}); // only alpha: beta comes from the directory
  beta_mail.attach(beta);
  joiner_mail.attach(joiner);
  for (auto* e : {&alpha, &beta, &joiner}) e->start();

  ASSERT_TRUE(ticking_until({&alpha, &beta, &joiner}, [&] {
    return alpha.is_alive("alpha-1") && beta.is_alive("alpha-1") && joiner.is_alive("beta-0");
  }));
  // It announced the port the kernel gave it, not the wildcard it bound.
  const auto known = beta.members().at("alpha-1");
  EXPECT_EQ(known.role, "alpha");
  ASSERT_TRUE(known.endpoints.count("vpc"));
  EXPECT_TRUE(known.endpoints.at("vpc").starts_with("tcp://127.0.0.1:"));
  EXPECT_EQ(known.endpoints.at("vpc").find('*'), std::string::npos);

  // Both ways: a member that only heard of it from the directory reaches it, and back.
  ASSERT_EQ(beta.send("control", "alpha-1", make_envelope(ping{7, 0, {}})), send_status::ok);
  ASSERT_TRUE(joiner_mail.wait_for([&] { return joiner_mail.count<ping>() == 1; }));
  EXPECT_EQ(joiner_mail.messages[0].first, "beta-0"); // who the connection proved
  ASSERT_EQ(joiner.send("control", "beta-0", make_envelope(ping{8, 0, {}})), send_status::ok);
  ASSERT_TRUE(beta_mail.wait_for([&] { return beta_mail.count<ping>() == 1; }));
  EXPECT_EQ(beta_mail.messages[0].first, "alpha-1");
}

TEST(endpoint_join, a_restarted_config_member_learns_the_joined_instance_again) {
  join_cluster c;
  auto alpha = std::make_unique<endpoint>(c.config, "alpha-0", make_plane, 100);
  const instance_claim claim(c.config, "alpha");
  const auto joined_config = c.with_joined(claim);
  endpoint joiner(joined_config, "alpha-1", make_plane, 300);
  joiner.set_join_seeds({{"alpha-0", ""}});
  alpha->start();
  joiner.start();
  ASSERT_TRUE(ticking_until({alpha.get(), &joiner}, [&] { return alpha->is_alive("alpha-1"); }));

  // alpha-0's process restarts: the new one knows only the config.
  alpha.reset();
  ASSERT_TRUE(ticking_until({&joiner}, [&] { return !joiner.is_alive("alpha-0"); }));
  alpha = std::make_unique<endpoint>(c.config, "alpha-0", make_plane, 101);
  alpha->start();
  EXPECT_FALSE(alpha->is_alive("alpha-1"));
  ASSERT_TRUE(ticking_until({alpha.get(), &joiner}, [&] {
    return alpha->is_alive("alpha-1") && joiner.live_incarnation("alpha-0") == 101u;
  }));
}

TEST(endpoint_join, a_config_member_that_left_before_the_join_is_known_to_have_left) {
  join_cluster c;
  inbox joiner_mail;
  endpoint alpha(c.config, "alpha-0", make_plane, 100);
  auto beta = std::make_unique<endpoint>(c.config, "beta-0", make_plane, 200);
  alpha.start();
  beta->start();
  ASSERT_TRUE(ticking_until({&alpha, beta.get()},
                            [&] { return alpha.live_incarnation("beta-0") == 200u; }));
  // beta-0 leaves (scaled in, or switched role) and its process ends.
  beta->announce_leave("scaled in");
  ASSERT_TRUE(ticking_until(
      {&alpha}, [&] { return alpha.members().at("beta-0").state == member_state::left; }));
  beta.reset();

  // The joiner's config still lists beta-0. Told by alpha-0's directory that it left, it
  // neither waits for beta-0's heartbeats nor declares it down for their silence.
  const instance_claim claim(c.config, "alpha");
  const auto joined_config = c.with_joined(claim);
  endpoint joiner(joined_config, "alpha-1", make_plane, 300);
  joiner.set_join_seeds({{"alpha-0", ""}});
  joiner_mail.attach(joiner);
  joiner.start();
  ASSERT_TRUE(ticking_until({&alpha, &joiner}, [&] {
    return alpha.is_alive("alpha-1") && joiner.members().at("beta-0").state == member_state::left;
  }));
  EXPECT_EQ(joiner.members().at("beta-0").incarnation, 200u);
  {
    std::lock_guard lock(joiner_mail.m);
    for (auto& e : joiner_mail.events)
      EXPECT_FALSE(e.peer == "beta-0" && e.what == membership_event::kind::down) << e.reason;
  }

  // beta-0 comes back (scaled up again) as a new process that knows only the config: the
  // joiner keeps announcing itself to it, so each learns the other.
  beta = std::make_unique<endpoint>(c.config, "beta-0", make_plane, 201);
  beta->start();
  ASSERT_TRUE(ticking_until({&alpha, beta.get(), &joiner}, [&] {
    return beta->is_alive("alpha-1") && joiner.live_incarnation("beta-0") == 201u;
  }));
}

TEST(endpoint_join, a_config_member_that_left_and_came_back_learns_the_joined_instance) {
  join_cluster c;
  endpoint alpha(c.config, "alpha-0", make_plane, 100);
  auto beta = std::make_unique<endpoint>(c.config, "beta-0", make_plane, 200);
  const instance_claim claim(c.config, "alpha");
  const auto joined_config = c.with_joined(claim);
  endpoint joiner(joined_config, "alpha-1", make_plane, 300);
  joiner.set_join_seeds({{"alpha-0", ""}});
  for (auto* e : {&alpha, beta.get(), &joiner}) e->start();
  ASSERT_TRUE(ticking_until({&alpha, beta.get(), &joiner}, [&] {
    return beta->is_alive("alpha-1") && joiner.is_alive("beta-0");
  }));

  // beta-0 leaves (the joiner hears it first-hand), then a new beta-0 starts from the config.
  beta->announce_leave("scaled in");
  ASSERT_TRUE(ticking_until(
      {&joiner}, [&] { return joiner.members().at("beta-0").state == member_state::left; }));
  beta.reset();
  beta = std::make_unique<endpoint>(c.config, "beta-0", make_plane, 201);
  beta->start();
  EXPECT_FALSE(beta->is_alive("alpha-1"));
  ASSERT_TRUE(ticking_until({&alpha, beta.get(), &joiner}, [&] {
    return beta->is_alive("alpha-1") && joiner.live_incarnation("beta-0") == 201u;
  }));
}

TEST(endpoint_join, names_are_held_while_their_process_lives) {
  join_cluster c;
  auto first = std::make_unique<instance_claim>(c.config, "alpha");
  const instance_claim second(c.config, "alpha");
  EXPECT_EQ(first->name(), "alpha-1");
  EXPECT_EQ(second.name(), "alpha-2");
  first.reset(); // its process ended: the name is free again
  const instance_claim third(c.config, "alpha");
  EXPECT_EQ(third.name(), "alpha-1");
}

TEST(endpoint_join, a_join_claiming_another_role_is_refused) {
  join_cluster c;
  endpoint alpha(c.config, "alpha-0", make_plane, 100), beta(c.config, "beta-0", make_plane, 200);
  alpha.start();
  beta.start();
  // beta-0 is a beta by the config: it cannot join as an alpha, whatever it says.
  ASSERT_EQ(beta.send("control", "alpha-0", make_envelope(member_join{"beta-0", "alpha", 201, {}})),
            send_status::ok);
  ASSERT_TRUE(eventually([&] {
    const auto r = alpha.rejected_messages();
    return r.count("join_with_another_role") && r.at("join_with_another_role") >= 1;
  }));
  EXPECT_EQ(alpha.members().at("beta-0").role, "beta");
}
