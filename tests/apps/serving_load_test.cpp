// 200 requests at once on the multi-process cluster with two prefill and two decode
// instances: every request completes with its own reference tokens (none lost, none answered
// twice or with another's tokens), and afterwards no KV block is held and nothing is queued.

#include "serving_fixture.hpp"

#include <chrono>
#include <gtest/gtest.h>
#include <set>
#include <thread>

using namespace supernode::testing;

TEST(serving_load, two_hundred_concurrent_requests_on_pdc_2p2d_all_complete_and_free_their_kv) {
  constexpr size_t n = 200;
  // All from this one address: above the per-client default of 64 connections.
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir(),
                          {{{"gateway", "max_connections_per_client", std::to_string(n)}}});
  ASSERT_TRUE(cluster.up());
  std::vector<served_prompt> prompts;
  for (size_t i = 0; i < n; ++i)
    prompts.push_back(
        {test_prompt(4 + static_cast<int64_t>(i % 40), 5000 + static_cast<int64_t>(i)), 4});
  std::vector<http_reply> replies(n);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < n; ++i)
    clients.emplace_back([&, i] {
      replies[i] =
          http_call(cluster.port(), "POST", "/v1/completions", completion_body(prompts[i]));
    });
  for (auto& t : clients) t.join();

  std::set<std::string> ids;
  for (size_t i = 0; i < n; ++i) {
    auto got = answered_tokens(replies[i]);
    ASSERT_TRUE(got) << "request " << i << ": " << replies[i].status << " " << replies[i].body
                     << replies[i].error;
    EXPECT_EQ(*got, reference_tokens(prompts[i])) << "request " << i;
    ids.insert(nlohmann::json::parse(replies[i].body)["id"].get<std::string>());
  }
  EXPECT_EQ(ids.size(), n) << "response ids repeat";

  // The decode instances report released blocks every heartbeat; wait for the reports.
  const auto [text, settled] = poll_metrics(cluster.port(), [](const std::string& t) {
    return metric(t, "supernode_kv_blocks_used", {{"instance", "decode-0"}}) == 0.0 &&
           metric(t, "supernode_kv_blocks_used", {{"instance", "decode-1"}}) == 0.0 &&
           metric(t, "supernode_scheduler_queued") == 0.0;
  });
  ASSERT_TRUE(settled) << text;
  EXPECT_EQ(metric(text, "supernode_gateway_requests_in_flight"), 0.0);
}
