// Expert parallelism through the HTTP API: a decode instance of 4 rank processes with
// microbatch pipelining, the same over ZeroMQ instead of shared memory, and of 8 rank threads
// re-placing its experts (EPLB) every 4 forwards while requests are mid-generation, give the
// reference engine's greedy tokens; a rank process killed mid-step fails the group's requests with
// an error naming it, and nothing hangs.

#include "serving_fixture.hpp"

#include <csignal>
#include <fstream>
#include <gtest/gtest.h>
#include <thread>

using namespace supernode::testing;

namespace {

std::vector<served_prompt> prompts(size_t n, int64_t salt, int32_t max_tokens) {
  std::vector<served_prompt> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(
        {test_prompt(1 + static_cast<int64_t>((i * 29) % 60), salt + static_cast<int64_t>(i)),
         max_tokens + static_cast<int32_t>(i % 5)});
  return out;
}

// Sends every prompt at once and checks each answer against the reference engine.
void expect_reference_tokens(const serving_cluster& cluster, const std::vector<served_prompt>& ps) {
  std::vector<http_reply> replies(ps.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < ps.size(); ++i)
    clients.emplace_back([&, i] {
      replies[i] = http_call(cluster.port(), "POST", "/v1/completions",
                             completion_body(ps[i], i % 2 == 0), std::chrono::seconds(120));
    });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < ps.size(); ++i) {
    auto got = answered_tokens(replies[i]);
    ASSERT_TRUE(got) << replies[i].status << " " << replies[i].body << replies[i].error;
    EXPECT_EQ(*got, reference_tokens(ps[i])) << "prompt " << i;
  }
}

} // namespace

TEST(serving_ep, four_rank_processes_with_microbatching_give_the_reference_tokens) {
  serving_cluster cluster("lep-ep4.toml", tiny_model_dir(), {{"ep", "microbatch", "true"}});
  ASSERT_TRUE(cluster.up());
  for (auto& p : prompts(3, 3000, 4)) {
    auto r = http_call(cluster.port(), "POST", "/v1/completions", completion_body(p));
    auto got = answered_tokens(r);
    ASSERT_TRUE(got) << r.status << " " << r.body;
    EXPECT_EQ(*got, reference_tokens(p));
  }
  expect_reference_tokens(cluster, prompts(16, 3100, 8));
  EXPECT_NE(read_logs(cluster.run_dir()).find("two microbatches"), std::string::npos);
  // The stage breakdown reaches /metrics (load reports every heartbeat, then cluster stats).
  const auto [text, reported] = poll_metrics(cluster.port(), [](const std::string& t) {
    const auto experts =
        metric(t, "supernode_ep_stage_seconds",
               {{"instance", "decode-0"}, {"moe_layer", "0"}, {"stage", "experts"}});
    return experts && *experts > 0 && metric(t, "supernode_ep_forwards") > 0.0;
  });
  EXPECT_TRUE(reported) << text.substr(0, 4000);
}

TEST(serving_ep, the_same_protocol_over_zeromq_gives_the_reference_tokens) {
  // The dispatch flow on the RDMA plane (ZeroMQ ipc), as ranks on different hosts would run it.
  serving_cluster cluster("lep-ep4.toml", tiny_model_dir(), {{"flows", "dispatch", "\"rdma\""}});
  ASSERT_TRUE(cluster.up());
  expect_reference_tokens(cluster, prompts(12, 3500, 6));
  EXPECT_NE(read_logs(cluster.run_dir()).find("decode-ep0 rank 0 of 4 over zmq"),
            std::string::npos);
}

TEST(serving_ep, eplb_replacing_experts_mid_generation_changes_no_token) {
  serving_cluster cluster("lep-ep8-threads.toml", tiny_model_dir(),
                          {{"ep", "eplb_interval", "4"}, {"ep", "redundant_experts", "1"}});
  ASSERT_TRUE(cluster.up());
  // 24 requests of 20+ tokens: several re-placements land while each is generating.
  expect_reference_tokens(cluster, prompts(24, 4000, 20));
  const auto logs = read_logs(cluster.run_dir());
  EXPECT_NE(logs.find("EPLB: placement v2 "), std::string::npos) << "no re-placement happened";
}

TEST(serving_ep, a_rank_process_killed_mid_step_fails_the_groups_requests_without_a_hang) {
  // Left dead (the supervisor would restart it): the broken group is what is tested; resuming
  // gives up after 3 s (the default waits 30 s).
  serving_cluster cluster(
      "lep-ep4.toml", tiny_model_dir(),
      {{"process.decode", "restart", "\"never\""}, {"gateway", "recovery_timeout_ms", "3000"}});
  ASSERT_TRUE(cluster.up());
  // Long generations on every rank, so the kill lands while the group is stepping.
  std::vector<http_reply> replies(8);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < replies.size(); ++i)
    clients.emplace_back([&, i] {
      replies[i] = http_call(cluster.port(), "POST", "/v1/completions",
                             completion_body({test_prompt(20, 500 + static_cast<int64_t>(i)), 400}),
                             std::chrono::seconds(60));
    });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool stepping = false;
  while (!stepping && std::chrono::steady_clock::now() < until) { // the batch runs on some rank
    const auto text = http_call(cluster.port(), "GET", "/metrics").body;
    double running = 0;
    for (int r = 0; r < 4; ++r)
      running +=
          metric(text, "supernode_instance_running", {{"instance", "decode-" + std::to_string(r)}})
              .value_or(0.0);
    stepping = running > 0.0;
    // Polling pace only (the gateway bounds its connections); nothing waits on this timing.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pid_t pid = 0;
  std::ifstream(cluster.run_dir() / "pids" / "decode-2.pid") >> pid;
  EXPECT_GT(pid, 0);
  EXPECT_EQ(::kill(pid, SIGKILL), 0);
  for (auto& t : clients) t.join();
  ASSERT_TRUE(stepping) << "the requests never reached a decode rank; logs:\n"
                        << read_logs(cluster.run_dir()) << "\nreplies: " << replies[0].status << " "
                        << replies[0].body << replies[0].error;
  for (auto& r : replies) {
    EXPECT_TRUE(r.error.empty()) << r.error; // answered, not timed out
    EXPECT_GE(r.status, 500u) << r.body;
    const bool named =
        r.body.find("decode-2") != std::string::npos || r.body.find("rank 2") != std::string::npos;
    EXPECT_TRUE(named) << r.body;
  }
  // The surviving ranks report their group broken: new requests are refused at once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    auto later = http_call(cluster.port(), "POST", "/v1/completions",
                           completion_body({test_prompt(5, 1), 2}), std::chrono::seconds(30));
    ASSERT_TRUE(later.error.empty()) << later.error;
    if (later.status == 503u &&
        later.body.find("no decode instance is serving") != std::string::npos)
      break;
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << later.status << " " << later.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // polling pace, as poll_metrics
  }
  // And /health says so, with the reason, instead of "ok".
  const auto health = http_call(cluster.port(), "GET", "/health");
  EXPECT_EQ(health.status, 503u) << health.body;
  EXPECT_NE(health.body.find("no decode instance is serving"), std::string::npos) << health.body;
  EXPECT_NE(health.body.find("decode-2 (decode) is down"), std::string::npos) << health.body;
}
