// The planner's rounds without processes: a scripted supervisor (its status answers, the scale
// requests it receives), scripted latencies and statistics; what the runner sends where.

#include "../../support/eventually.hpp"
#include "services/gateway/planner_runner.hpp"

#include <future>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace supernode::services::gateway {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;
using clock_type = planner_runner::clock;

// The cluster the hooks show: slots by phase, the latencies measured, what reached it.
struct scripted_cluster {
  std::mutex mutex;
  std::map<std::string, std::string> phases{{"prefill-0", "serving"}, {"decode-0", "serving"}};
  latency_window::p90s p90{400.0, 250.0}; // TPOT over its 100 ms target
  bool supervisor = true;
  std::vector<json> scale_requests;
  std::vector<int64_t> caps_sent;
  std::optional<std::string> scale_answer = R"({"ok":true,"took_s":1.5,"started":["decode-1"]})";

  planner_hooks hooks() {
    planner_hooks h;
    h.ask_supervisor = [this](const std::string& line, std::chrono::milliseconds) {
      std::lock_guard lock(mutex);
      const auto request = json::parse(line);
      if (!supervisor) return std::optional<std::string>();
      if (request["request"] == "scale") {
        scale_requests.push_back(request);
        return scale_answer;
      }
      json status{{"ok", true}, {"processes", json::array()}};
      for (auto& [name, phase] : phases)
        status["processes"].push_back({{"process", name}, {"state", "running"}, {"phase", phase}});
      return std::optional<std::string>(status.dump());
    };
    h.stats = [] { return std::make_shared<const protocol::cluster_stats>(); };
    h.latencies = [this](clock_type::time_point) {
      std::lock_guard lock(mutex);
      return p90;
    };
    h.send_batch_cap = [this](int64_t cap) {
      std::lock_guard lock(mutex);
      caps_sent.push_back(cap);
    };
    return h;
  }
  size_t scales() {
    std::lock_guard lock(mutex);
    return scale_requests.size();
  }
};

planner::planner_config config() {
  planner::planner_config c;
  c.enabled = true;
  c.interval = 1000ms;
  c.cooldown = 0ms;
  c.min_prefill = 1, c.max_prefill = 2;
  c.min_decode = 1, c.max_decode = 2;
  return c;
}

planner_runner make_runner(scripted_cluster& cluster, planner::planner_config c = config()) {
  return planner_runner(c, {}, {"prefill", "decode"}, cluster.hooks(), log::logger("gateway-0"),
                        "planner-7-");
}

TEST(planner_runner, applies_a_scale_up_through_the_supervisors_scale_request) {
  scripted_cluster cluster;
  auto runner = make_runner(cluster);
  const auto t0 = clock_type::now();
  runner.round(t0); // the first sample: no window measured yet
  EXPECT_EQ(cluster.scales(), 0u);
  runner.round(t0 + 1000ms);
  ASSERT_TRUE(
      testing::eventually([&] { return cluster.scales() == 1 && !runner.scale_waiting(); }));
  EXPECT_EQ(cluster.scale_requests[0],
            json::parse(R"({"request":"scale","counts":{"prefill":1,"decode":2},
                            "operation_id":"planner-7-1","drain_timeout_ms":60000})"));
  const auto metrics = runner.render_metrics();
  EXPECT_NE(metrics.find("supernode_planner_decisions_total{action=\"scale_up_decode\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("supernode_planner_tpot_p90_seconds 0.25"), std::string::npos) << metrics;

  // While the new slot starts nothing more is decided; once it serves, the next decision is
  // the next operation id.
  cluster.phases["decode-1"] = "starting";
  runner.round(t0 + 2000ms);
  EXPECT_EQ(cluster.scales(), 1u);
  cluster.phases["decode-1"] = "serving";
  cluster.p90 = {100.0, 20.0}; // far under both targets, nothing queued: decode gives one back
  runner.round(t0 + 3000ms);
  ASSERT_TRUE(
      testing::eventually([&] { return cluster.scales() == 2 && !runner.scale_waiting(); }));
  EXPECT_EQ(cluster.scale_requests[1]["operation_id"], "planner-7-2");
  EXPECT_EQ(cluster.scale_requests[1]["counts"], json::parse(R"({"prefill":1,"decode":1})"));
}

TEST(planner_runner, asks_nothing_more_while_a_scale_request_waits) {
  scripted_cluster cluster;
  std::promise<void> release;
  auto released = release.get_future().share();
  auto hooks = cluster.hooks();
  auto ask = hooks.ask_supervisor;
  hooks.ask_supervisor = [ask, released](const std::string& line, std::chrono::milliseconds t) {
    if (line.find("\"scale\"") != std::string::npos) released.wait(); // the change takes long
    return ask(line, t);
  };
  planner_runner runner(config(), {}, {"prefill", "decode"}, hooks, log::logger("gateway-0"),
                        "planner-1-");
  const auto t0 = clock_type::now();
  runner.round(t0);
  runner.round(t0 + 1000ms);
  ASSERT_TRUE(runner.scale_waiting());
  // The status still shows the old counts (the supervisor has not started the slot yet): a
  // planner that went by the status alone would ask again.
  runner.round(t0 + 2000ms);
  runner.round(t0 + 3000ms);
  release.set_value();
  ASSERT_TRUE(
      testing::eventually([&] { return cluster.scales() == 1 && !runner.scale_waiting(); }));
  EXPECT_EQ(cluster.scales(), 1u);
}

TEST(planner_runner, pushes_the_batch_cap_to_decode_every_round) {
  scripted_cluster cluster;
  auto c = config();
  c.batch_cap = true;
  c.max_decode = 1; // no decode instance to add: the cap is the answer
  planner::planner_limits limits;
  limits.decode_max_batch = 64;
  // A TPOT line from two batches: 10 sequences at 60 ms, 30 at 140 ms (4 ms per sequence over
  // 20 ms): 100 ms is met up to 20 sequences per instance.
  auto t = clock_type::now();
  std::shared_ptr<const protocol::cluster_stats> stats; // what the scheduler reported last
  auto decode_running = [&](int64_t running) {
    auto s = std::make_shared<protocol::cluster_stats>();
    protocol::instance_stats d;
    d.name = "decode-0";
    d.role = "decode";
    d.kv_blocks_total = 1000;
    d.running = running;
    s->instances = {d};
    stats = s;
  };
  planner_hooks hooks = cluster.hooks();
  hooks.stats = [&] { return stats; };
  planner_runner capped(c, limits, {"prefill", "decode"}, hooks, log::logger("gateway-0"),
                        "planner-1-");
  decode_running(10);
  cluster.p90 = {400.0, 60.0};
  capped.round(t);
  decode_running(30);
  cluster.p90 = {400.0, 140.0};
  capped.round(t += 1000ms);
  EXPECT_EQ(capped.batch_cap(), 20);
  EXPECT_EQ(cluster.caps_sent, std::vector<int64_t>{20});
  capped.round(t += 1000ms);
  EXPECT_EQ(cluster.caps_sent, (std::vector<int64_t>{20, 20})) << "resent: new instances get it";
  EXPECT_EQ(cluster.scales(), 0u) << "a cap alone asks the supervisor nothing";
}

TEST(planner_runner, waits_for_a_supervisor_without_deciding) {
  scripted_cluster cluster;
  cluster.supervisor = false;
  auto runner = make_runner(cluster);
  const auto t0 = clock_type::now();
  for (int i = 0; i < 4; ++i) runner.round(t0 + i * 1000ms);
  EXPECT_EQ(cluster.scales(), 0u);
  EXPECT_EQ(runner.render_metrics().find("supernode_planner_instances"), std::string::npos)
      << "no sample was taken";
}

TEST(planner_runner, runs_rounds_on_its_own_thread_until_stopped) {
  scripted_cluster cluster;
  auto c = config();
  c.interval = 100ms; // a round every 25 ms
  auto runner = make_runner(cluster, c);
  runner.start();
  EXPECT_TRUE(testing::eventually([&] { return cluster.scales() >= 1; }));
  runner.stop();
}

} // namespace
} // namespace supernode::services::gateway
