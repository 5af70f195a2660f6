// A prefill process killed while the cluster serves: requests routed to it end with an error
// naming it instead of hanging, later requests are refused at once (no prefill instance is
// left), and the decode instance gives back every KV block it had reserved for them.

#include "serving_fixture.hpp"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <thread>

using namespace supernode::testing;

TEST(serving_fault, a_killed_prefill_instance_fails_its_requests_and_frees_their_kv) {
  // Left dead (the supervisor would restart it), and resuming gives up after 3 s (the default
  // waits 30 s).
  serving_cluster cluster(
      "pdc-1p1d.toml", tiny_model_dir(),
      {{"process.prefill", "restart", "\"never\""}, {"gateway", "recovery_timeout_ms", "3000"}});
  ASSERT_TRUE(cluster.up());
  served_prompt p{test_prompt(40, 9), 8};
  auto ok = http_call(cluster.port(), "POST", "/v1/completions", completion_body(p));
  ASSERT_EQ(ok.status, 200u) << ok.body;

  // The run folder and what `cluster up` put in it are this user's alone.
  namespace fs = std::filesystem;
  const auto rw = fs::perms::owner_read | fs::perms::owner_write;
  for (const auto& folder :
       {cluster.run_dir(), cluster.run_dir() / "logs", cluster.run_dir() / "pids"})
    EXPECT_EQ(fs::status(folder).permissions(), fs::perms::owner_all) << folder;
  EXPECT_EQ(fs::status(cluster.run_dir() / "pids" / "prefill-0.pid").permissions(), rw);
  EXPECT_EQ(fs::status(cluster.run_dir() / "logs" / "prefill-0.log").permissions(), rw);
  // The keys its shm rings are signed with, made on start (the config sets no key_dir).
  EXPECT_EQ(fs::status(cluster.run_dir() / "keys").permissions(), fs::perms::owner_all);
  EXPECT_EQ(fs::status(cluster.run_dir() / "keys" / "prefill-0.secret").permissions(), rw);

  pid_t pid = 0;
  std::ifstream(cluster.run_dir() / "pids" / "prefill-0.pid") >> pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);

  // In flight while the death is discovered, or sent after: none may hang or succeed.
  std::vector<http_reply> replies(4);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < replies.size(); ++i)
    clients.emplace_back([&, i] {
      replies[i] = http_call(cluster.port(), "POST", "/v1/completions",
                             completion_body({test_prompt(30, 100 + static_cast<int64_t>(i)), 8}),
                             std::chrono::seconds(30));
    });
  for (auto& t : clients) t.join();
  for (auto& r : replies) {
    EXPECT_TRUE(r.error.empty()) << r.error; // answered, not timed out
    EXPECT_GE(r.status, 500u) << r.body;
    EXPECT_NE(r.body.find("prefill"), std::string::npos) << r.body;
  }
  // Once the scheduler has heard of the death, refused at once; until then (a loaded machine
  // can delay the news), an error naming the dead instance.
  const auto refused_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    auto later = http_call(cluster.port(), "POST", "/v1/completions", completion_body(p),
                           std::chrono::seconds(30));
    ASSERT_TRUE(later.error.empty()) << later.error;
    if (later.status == 503u &&
        later.body.find("no prefill instance is alive") != std::string::npos)
      break;
    EXPECT_NE(later.body.find("prefill-0"), std::string::npos) << later.status << " " << later.body;
    ASSERT_LT(std::chrono::steady_clock::now(), refused_by) << later.body;
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // polling pace, as poll_metrics
  }

  const auto [text, freed] = poll_metrics(cluster.port(), [](const std::string& text) {
    return metric(text, "supernode_kv_blocks_used", {{"instance", "decode-0"}}) == 0.0 &&
           metric(text, "supernode_gateway_requests_in_flight") == 0.0;
  });
  EXPECT_TRUE(freed) << text;
}
