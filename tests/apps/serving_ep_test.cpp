// Expert parallelism through the HTTP API: a decode instance of 4 rank processes with
// microbatch pipelining, the same over ZeroMQ instead of shared memory, and of 8 rank threads
// re-placing its experts (EPLB) every 4 forwards while requests are mid-generation, give the
// reference engine's greedy tokens. (A rank killed mid-step: serving_recovery_test.)

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

TEST(serving_ep, four_rank_processes_with_microbatching_and_mtp_give_the_reference_tokens) {
  // Drafts verified through FusedDispatch/FusedCombine in two microbatches: each sequence's
  // rows (its fed token and its drafts) stay in one microbatch.
  serving_cluster cluster("lep-ep4.toml", tiny_model_dir(),
                          {{"ep", "microbatch", "true"}, {"decode", "mtp", "2"}});
  ASSERT_TRUE(cluster.up());
  expect_reference_tokens(cluster, prompts(16, 3200, 8));
  const auto [text, drafted] = poll_metrics(cluster.port(), [](const std::string& t) {
    return metric_sum(t, "supernode_mtp_drafted_tokens") > 0; // on whichever ranks ran them
  });
  EXPECT_TRUE(drafted) << text;
}

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
