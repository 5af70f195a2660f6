// Between the planner and a running cluster, without processes: the process kinds of its two
// roles, a sample made from a scripted supervisor status, measured latencies and the
// scheduler's statistics, and the scale request a decision becomes.

#include "planner_samples.hpp"
#include "services/planner/planner_sampler.hpp"

#include <gtest/gtest.h>

namespace supernode::services::planner {
namespace {

using namespace testing;
using json = nlohmann::json;

const planner_kinds kinds{"prefill", "decode", false};

// What the supervisor answers to {"request":"status"} on a pdc-2p2d being scaled: decode-2
// starting, prefill-1 draining, decode-1 restarting after a crash, prefill-2 scaled down.
json scripted_status() {
  auto slot = [](const char* name, const char* state, const char* phase) {
    return json{{"process", name}, {"state", state}, {"phase", phase}, {"ready", true}};
  };
  return {{"ok", true},
          {"processes",
           {slot("gateway-0", "running", "serving"), slot("prefill-0", "running", "serving"),
            slot("prefill-1", "running", "draining"), slot("prefill-2", "stopped", "down"),
            slot("decode-0", "running", "serving"), slot("decode-1", "restarting", "down"),
            slot("decode-2", "running", "starting"), slot("decode-3", "gave_up", "down")}}};
}

protocol::instance_stats instance(const char* name, const char* role, bool alive) {
  protocol::instance_stats i;
  i.name = name;
  i.role = role;
  i.alive = alive;
  return i;
}

TEST(planner_sampler, finds_the_process_kinds_of_prefill_and_decode) {
  const auto cluster =
      transport::cluster_config::parse("[process.front]\nroles = [\"gateway\", \"scheduler\"]\n"
                                       "[process.p]\nroles = [\"prefill\"]\ncount = 2\n"
                                       "[process.d]\nroles = [\"decode\"]\ncount = 4\n",
                                       "x.toml");
  planner_config c = test_config();
  c.max_prefill = 2;
  const auto found = planner_process_kinds(cluster, c);
  ASSERT_FALSE(found.problem) << found.problem->what;
  EXPECT_EQ(found.kinds.prefill, "p");
  EXPECT_EQ(found.kinds.decode, "d");
  c.max_prefill = 3; // one more than [process.p] has slots: the third joins
  EXPECT_FALSE(planner_process_kinds(cluster, c).problem);
  c.max_prefill = 65; // more processes than a scale may ask for
  const auto over = planner_process_kinds(cluster, c);
  ASSERT_TRUE(over.problem);
  EXPECT_EQ(over.problem->key, "max_prefill");
  EXPECT_EQ(over.problem->table, std::vector<std::string>{"planner"});
  // Decode instances with expert shards form groups: no joins, so the slots are the bound.
  const auto grouped =
      transport::cluster_config::parse("[process.front]\nroles = [\"gateway\", \"scheduler\"]\n"
                                       "[process.p]\nroles = [\"prefill\"]\ncount = 2\n"
                                       "[process.d]\nroles = [\"decode\"]\ncount = 4\n"
                                       "[process.s]\nroles = [\"expert_shard\"]\ncount = 4\n",
                                       "x.toml");
  c.max_prefill = 2;
  c.max_decode = 5;
  const auto held = planner_process_kinds(grouped, c);
  ASSERT_TRUE(held.problem);
  EXPECT_EQ(held.problem->key, "max_decode");
  EXPECT_NE(held.problem->what.find("expert-parallel groups"), std::string::npos)
      << held.problem->what;
}

TEST(planner_sampler, counts_each_role_by_phase_from_the_supervisor_status) {
  const auto status = scripted_status();
  const auto p = counts_of_kind(status, "prefill");
  EXPECT_EQ(p.serving, 1);
  EXPECT_EQ(p.starting, 0);
  EXPECT_EQ(p.draining, 1) << "prefill-1 drains; prefill-2 is down for good";
  const auto d = counts_of_kind(status, "decode");
  EXPECT_EQ(d.serving, 1);
  EXPECT_EQ(d.starting, 2) << "decode-2 starts, and decode-1 restarts by itself";
  EXPECT_EQ(d.draining, 0) << "decode-3 gave up: not counted";
  EXPECT_EQ(counts_of_kind(json::object(), "decode").serving, 0) << "no processes: nothing";
}

TEST(planner_sampler, makes_a_sample_from_status_latencies_and_the_schedulers_statistics) {
  protocol::cluster_stats stats;
  stats.queued = 7;
  auto p0 = instance("prefill-0", "prefill", true);
  p0.outstanding_prompt_tokens = 900;
  auto p1 = instance("prefill-1", "prefill", false); // dead: its load is not the cluster's
  p1.outstanding_prompt_tokens = 5000;
  auto d0 = instance("decode-0", "decode", true);
  d0.running = 10, d0.kv_blocks_used = 300, d0.kv_blocks_total = 1000;
  d0.waiting = 4; // decode-0's batch is full (10 of 10 seats): these wait for a seat
  auto d2 = instance("decode-2", "decode", true);
  d2.running = 2, d2.kv_blocks_used = 100, d2.kv_blocks_total = 1000;
  d2.waiting = 3; // seats free: these wait for their KV only
  stats.instances = {p0, p1, d0, d2, instance("gateway-0", "gateway", true)};

  const auto s = make_sample(t0, scripted_status(), kinds, {1500.0, std::nullopt}, &stats,
                             /*cap=*/10, /*max_batch=*/64);
  EXPECT_EQ(s.at, t0);
  EXPECT_EQ(s.prefill.serving, 1);
  EXPECT_EQ(s.decode.starting, 2);
  EXPECT_EQ(s.ttft_p90_ms, 1500.0);
  EXPECT_FALSE(s.tpot_p90_ms);
  EXPECT_EQ(s.queued, 7 + 4) << "the scheduler's queue and the seats waited for at decode-0";
  EXPECT_EQ(s.prefill_outstanding_tokens, 900);
  EXPECT_EQ(s.decode_running, 12);
  EXPECT_DOUBLE_EQ(s.decode_kv_usage, 0.2);
  EXPECT_EQ(s.decode_batch_cap, 10);

  const auto before_stats = make_sample(t0, scripted_status(), kinds, {}, nullptr, 0, 64);
  EXPECT_EQ(before_stats.queued, 0);
  EXPECT_EQ(before_stats.decode_kv_usage, 0.0);
  EXPECT_EQ(before_stats.decode.serving, 1) << "counts come from the status alone";
}

TEST(planner_sampler, a_switched_process_counts_for_the_role_it_serves) {
  const auto status = json::parse(R"({"processes":[
      {"process":"prefill-0","serves":"prefill","phase":"serving","state":"running"},
      {"process":"prefill-1","serves":"decode","phase":"serving","state":"running"},
      {"process":"decode-0","phase":"serving","state":"running"}]})");
  EXPECT_EQ(counts_of_kind(status, "prefill").serving, 1);
  EXPECT_EQ(counts_of_kind(status, "decode").serving, 2) << "decode-0 and the switched prefill-1";
}

TEST(planner_sampler, a_decision_becomes_the_supervisors_scale_request) {
  // TPOT p90 over target on one decode instance: one more.
  auto s = neutral(0ms, 1, 1);
  s.tpot_p90_ms = 250;
  const auto up = first_decision(s);
  ASSERT_EQ(summary(up), "scale_up_decode: prefill 1, decode 2");
  EXPECT_TRUE(changes_counts(*up, s));
  EXPECT_EQ(scale_request_for(*up, {"p", "d", false}, "planner-9-1", 60000ms),
            json::parse(R"({"request":"scale","counts":{"p":1,"d":2},
                            "operation_id":"planner-9-1","drain_timeout_ms":60000})"));

  // At max_total, decode hot and prefill idle: a switch is one fewer prefill process and one
  // more decode process, in one request.
  planner_config capped = test_config();
  capped.max_total = 3;
  auto at_cap = neutral(0ms, 2, 1);
  at_cap.ttft_p90_ms = 100;
  at_cap.tpot_p90_ms = 250;
  const auto sw = first_decision(at_cap, capped);
  ASSERT_EQ(summary(sw), "switch_p_to_d: prefill 1, decode 2");
  EXPECT_EQ(scale_request_for(*sw, kinds, "planner-1-2", 5000ms)["counts"],
            json::parse(R"({"prefill":1,"decode":2})"));
  // Made in place where the processes switch roles, as a count change where they cannot.
  EXPECT_FALSE(scale_request_for(*sw, kinds, "planner-1-2", 5000ms).contains("switch"));
  EXPECT_EQ(scale_request_for(*sw, {"prefill", "decode", true}, "planner-1-2", 5000ms)["switch"],
            true);
  EXPECT_FALSE(scale_request_for(*up, {"p", "d", true}, "planner-9-1", 60000ms).contains("switch"));

  // A batch cap alone changes no count: the supervisor is not asked.
  planner_decision cap_only;
  cap_only.target_counts = {{"prefill", 1}, {"decode", 1}};
  cap_only.decode_batch_cap = 8;
  cap_only.action = "set_batch_cap";
  EXPECT_FALSE(changes_counts(cap_only, neutral(0ms, 1, 1)));
}

} // namespace
} // namespace supernode::services::planner
