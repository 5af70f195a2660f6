// The planner in a running pdc-2p2d ([planner] enabled, a short interval and cooldown): idle, it
// scales both roles down to their minimum; a step to a load that fills decode's KV makes it add
// a decode instance; back to idle, it gives the instance back. Counts stay within the bounds all
// along, and every request answers with the reference engine's tokens.

#include "serving_faults.hpp"

#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace supernode::testing;
using json = nlohmann::json;

namespace {

// Per role, serving instances as the planner read them last (its gauge on /metrics).
struct planner_view {
  double prefill = -1, decode = -1;
  double scaled_up_decode = 0, scaled_down_decode = 0;
};

planner_view read_planner(const std::string& metrics) {
  auto gauge = [&](const char* role) {
    return metric(metrics, "supernode_planner_instances", {{"role", role}, {"state", "serving"}})
        .value_or(-1.0);
  };
  auto decisions = [&](const char* action) {
    return metric(metrics, "supernode_planner_decisions_total", {{"action", action}}).value_or(0.0);
  };
  return {gauge("prefill"), gauge("decode"), decisions("scale_up_decode"),
          decisions("scale_down_decode")};
}

// Polls the planner's view until `done` holds, checking the upper bounds at every look (the
// serving counts it read may dip under the lower ones while a process restarts on its own, which
// is no decision of the planner's: every_decision_stays_within_bounds checks those).
template<class Done>
bool planner_reaches(const serving_cluster& cluster, Done done, std::chrono::seconds timeout,
                     std::string& last) {
  return eventually(
      [&] {
        last = http_call(cluster.port(), "GET", "/metrics").body;
        const auto v = read_planner(last);
        EXPECT_LE(v.decode, 2) << "above max_decode";
        EXPECT_LE(v.prefill, 2) << "above max_prefill";
        return done(v);
      },
      timeout);
}

// Every decision the planner logged ("prefill 2 -> 1, decode 1 -> 1") aims within 1..2 of each.
void every_decision_stays_within_bounds(const serving_cluster& cluster) {
  std::istringstream lines(read_logs(cluster.run_dir()));
  int decisions = 0;
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find("planner: ");
    if (at == std::string::npos) continue;
    int p_from = 0, p_to = 0, d_from = 0, d_to = 0;
    const auto counts = line.find(": prefill ", at + 9);
    if (counts == std::string::npos ||
        std::sscanf(line.c_str() + counts, ": prefill %d -> %d, decode %d -> %d", &p_from, &p_to,
                    &d_from, &d_to) != 4)
      continue;
    ++decisions;
    EXPECT_TRUE(p_to >= 1 && p_to <= 2 && d_to >= 1 && d_to <= 2) << line;
  }
  EXPECT_GT(decisions, 0) << "no decision logged";
}

} // namespace

TEST(serving_planner, scales_decode_up_on_a_step_load_and_back_down_when_it_ends) {
  // KV for 64 blocks of 16 tokens per decode instance: 4 requests of 40 + 200 tokens fill one
  // (15 blocks each), so the high step runs into kv_high; the latency targets are out of reach
  // on purpose, so KV and the queue alone drive the decisions (on two shared cores latencies
  // are noise).
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir(),
                          {{"decode", "kv_blocks", "64"},
                           {"planner", "enabled", "true"},
                           {"planner", "interval_ms", "300"},
                           {"planner", "cooldown_ms", "600"},
                           {"planner", "ttft_ms", "3600000"},
                           {"planner", "tpot_ms", "600000"},
                           {"planner", "max_prefill", "2"},
                           {"planner", "max_decode", "2"},
                           {"planner", "kv_high", "0.7"},
                           {"planner", "kv_low", "0.4"}});
  ASSERT_TRUE(cluster.up());
  std::string metrics;

  // Low: idle, both roles go down to one instance.
  ASSERT_TRUE(planner_reaches(
      cluster, [](const planner_view& v) { return v.prefill == 1 && v.decode == 1; },
      std::chrono::seconds(90), metrics))
      << metrics << "\nlogs:\n"
      << log_digest(cluster.run_dir());
  const double ups_before = read_planner(metrics).scaled_up_decode;

  // High: clients send long requests back to back until the planner has added a decode
  // instance (and it serves), or the deadline passes.
  std::vector<served_prompt> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back({test_prompt(40, 300 + i), 200});
  for (auto& p : prompts) (void)reference_tokens(p); // computed before the load starts
  std::atomic<bool> high{true};
  std::mutex mutex;
  std::vector<std::pair<size_t, http_reply>> replies;
  std::vector<std::thread> clients;
  for (size_t c = 0; c < 8; ++c)
    clients.emplace_back([&, c] {
      for (size_t n = 0; high; ++n) {
        const size_t i = (c + n) % prompts.size();
        auto reply = http_call(cluster.port(), "POST", "/v1/completions",
                               completion_body(prompts[i], n % 2 == 1), std::chrono::seconds(120));
        std::lock_guard lock(mutex);
        replies.emplace_back(i, std::move(reply));
      }
    });
  const bool scaled_up = planner_reaches(
      cluster,
      [&](const planner_view& v) { return v.scaled_up_decode > ups_before && v.decode == 2; },
      std::chrono::seconds(120), metrics);
  high = false;
  for (auto& t : clients) t.join();
  ASSERT_TRUE(scaled_up) << "the high step added no decode instance:\n"
                         << metrics << "\nlogs:\n"
                         << log_digest(cluster.run_dir());

  // Low again: the added decode instance drains and goes.
  const double downs = read_planner(metrics).scaled_down_decode;
  EXPECT_TRUE(planner_reaches(
      cluster, [&](const planner_view& v) { return v.scaled_down_decode > downs && v.decode == 1; },
      std::chrono::seconds(90), metrics))
      << metrics;

  ASSERT_FALSE(replies.empty());
  for (auto& [i, reply] : replies) {
    ASSERT_EQ(reply.status, 200u) << reply.error << reply.body << "\nlogs:\n"
                                  << log_digest(cluster.run_dir());
    EXPECT_EQ(answered_tokens(reply), reference_tokens(prompts[i])) << "prompt " << i;
  }
  every_decision_stays_within_bounds(cluster);
  expect_serves_the_reference(cluster);
}
