// Forged messages against a running multi-process cluster (pdc-1p1d plus a spare echo process)
// while a client's request streams: from a raw ZeroMQ socket that names itself decode-0, and
// from a cluster member (the spare's identity, its own process replaced by the test) that speaks
// for others. Every forgery is refused and counted on /metrics; the victim's tokens are the
// reference's, decode-0 stays a member, and later requests are served.

#include "../support/eventually.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/serving/cluster_file.hpp"
#include "serving_fixture.hpp"
#include "transport/control_messages.hpp"
#include "transport/endpoint.hpp"
#include "transport/plane_factory.hpp"

#include <csignal>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <zmq.hpp>

using namespace supernode;
using namespace supernode::testing;
namespace pr = supernode::services::protocol;

namespace {

// The id of a completion answer ("cmpl-gateway-0-<id>").
uint64_t request_id_of(const http_reply& r) {
  const auto id = nlohmann::json::parse(r.body)["id"].get<std::string>();
  return std::stoull(id.substr(id.rfind('-') + 1));
}

// Whether the process of `pid` is gone (it is not our child: it cannot be waited for).
bool gone(pid_t pid) {
  return eventually([pid] { return ::kill(pid, 0) != 0; });
}

struct forgery_cluster {
  serving_cluster cluster{"pdc-1p1d.toml",
                          tiny_model_dir(),
                          // The spare stays dead once killed: the supervisor must not restart it
                          // under the impersonator.
                          {{"process.spare", "roles", "[\"echo\"]"},
                           {"process.spare", "restart", "\"never\""},
                           {"model", "max_context", "1024"}}};
  services::cluster_file file = services::cluster_file::load(cluster.config_file());

  // The spare's process is replaced by the test's own endpoint under its name and keys.
  std::unique_ptr<transport::endpoint> impersonate_spare() {
    pid_t pid = 0;
    std::ifstream(cluster.run_dir() / "pids" / "spare-0.pid") >> pid;
    if (pid <= 0 || ::kill(pid, SIGKILL) != 0 || !gone(pid)) return nullptr;
    auto ep = std::make_unique<transport::endpoint>(file.cluster, "echo-0", transport::make_plane,
                                                    transport::new_incarnation());
    ep->start();
    // Its first heartbeat tells every member which process now speaks as echo-0: until one
    // does, members hold what it sends (the killed process's incarnation is gone).
    ep->tick(std::chrono::steady_clock::now());
    return ep;
  }
  std::string control_address(const std::string& instance) const {
    const auto& c = file.cluster;
    return c.address(c.instance(instance), c.plane_for_flow("control"), "control");
  }
};

} // namespace

TEST(serving_forgery, forged_messages_are_refused_counted_and_change_nothing) {
  transport::register_control_messages();
  pr::register_serving_messages();
  forgery_cluster f;
  ASSERT_TRUE(f.cluster.up());
  const int port = f.cluster.port();
  const served_prompt warmup{test_prompt(20, 3), 2};
  const auto first = http_call(port, "POST", "/v1/completions", completion_body(warmup));
  ASSERT_EQ(first.status, 200u) << first.body;
  // Ids count up per gateway from a random prefix: the victim's is the next one.
  const pr::request_key victim_key{"gateway-0", request_id_of(first) + 1};

  // The member that will speak for others, ready before the victim starts.
  auto spare = f.impersonate_spare();
  ASSERT_TRUE(spare);

  // The victim: long enough that the forgeries reach its request while it decodes.
  const served_prompt victim{test_prompt(24, 77), 400};
  auto stream = std::async(std::launch::async, [&] {
    return http_call(port, "POST", "/v1/completions", completion_body(victim, true),
                     std::chrono::seconds(120));
  });
  const auto [in_flight, started] = poll_metrics(port, [](const std::string& text) {
    return metric(text, "supernode_gateway_requests_in_flight") == 1.0;
  });
  ASSERT_TRUE(started) << in_flight;

  // A raw socket without the cluster's keys, naming itself decode-0: a leave for decode-0. It
  // stays open to the end, so its handshake is tried (and refused), not cut short.
  zmq::context_t context;
  zmq::socket_t raw(context, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::routing_id, "decode-0");
  raw.set(zmq::sockopt::linger, 0);
  raw.connect(f.control_address("gateway-0"));
  const auto frame =
      transport::make_envelope(transport::member_leave{"decode-0", "forged", 0}).encode();
  raw.send(zmq::buffer(frame.data.get(), frame.size), zmq::send_flags::dontwait);

  // A member speaking for others.
  using namespace transport;
  spare->send("control", "gateway-0", make_envelope(member_leave{"decode-0", "forged", 1}));
  spare->send("control", "gateway-0", make_envelope(heartbeat{"decode-0", ~uint64_t{0}, 1}));
  pr::token_batch tokens;
  tokens.updates.push_back({victim_key, {7, 7, 7}, pr::finish_reason::stop, {}});
  spare->send("control", "gateway-0", make_envelope(tokens));
  spare->send("control", "decode-0",
              make_envelope(pr::cancel_request{victim_key, {pr::serving_errc::cancelled, "x"}}));
  spare->send("control", "scheduler-0",
              make_envelope(pr::cancel_request{victim_key, {pr::serving_errc::cancelled, "x"}}));
  pr::kv_transfer kv;
  kv.key = victim_key;
  spare->send("bulk", "decode-0", make_envelope(kv));

  // The victim's answer is the reference's, whole.
  const auto answer = stream.get();
  const auto ids = answered_tokens(answer);
  ASSERT_TRUE(ids) << answer.status << " ..."
                   << answer.body.substr(answer.body.size() -
                                         std::min<size_t>(answer.body.size(), 600));
  EXPECT_EQ(*ids, reference_tokens(victim));

  // Each forgery counted where it arrived; the raw socket never got past the handshake. The KV
  // run is refused as from a non-prefill instance, or, while the victim still waits for its KV
  // (a slow, sanitized prefill), as not from the prefill instance asked.
  const auto [text, counted] = poll_metrics(port, [](const std::string& text) {
    auto at = [&](const char* instance, const char* reason) {
      return metric(text, "supernode_rejected_messages_total",
                    {{"instance", instance}, {"reason", reason}})
          .value_or(0);
    };
    return at("gateway-0", "leave_for_another") >= 1 && at("gateway-0", "handshake_refused") >= 1 &&
           at("gateway-0", "heartbeat_for_another") >= 1 &&
           at("gateway-0", "not_from_placed_decode") >= 1 &&
           at("decode-0", "not_from_scheduler") >= 1 &&
           at("decode-0", "not_from_prefill") + at("decode-0", "not_from_asked_prefill") >= 1 &&
           at("scheduler-0", "not_from_request_gateway") >= 1;
  });
  EXPECT_TRUE(counted) << text;
  EXPECT_EQ(
      metric(text, "supernode_instance_alive", {{"instance", "decode-0"}, {"role", "decode"}}), 1.0)
      << text;
  // decode-0 is still a member everywhere: the next request is served, by the reference.
  const served_prompt later{test_prompt(16, 5), 6};
  const auto again = http_call(port, "POST", "/v1/completions", completion_body(later));
  ASSERT_EQ(again.status, 200u) << again.body;
  EXPECT_EQ(answered_tokens(again), reference_tokens(later));
  spare->stop();
}
