// The planner's count rules on hand-made samples: when it decides at all (interval, change in
// progress, cooldown), which role it scales and how far (one step, within min, max and
// max_total), the P<->D switch when capped, the hysteresis of scale-down, and its counter on
// /metrics. Every expectation is an exact decision.

#include "planner_samples.hpp"
#include "services/planner/planner_metrics.hpp"

#include <gtest/gtest.h>

using namespace supernode::services::planner;
using namespace supernode::services::planner::testing;

namespace {

using counts = std::map<std::string, int>;

// The sample observed at its time, then a decision asked for at that time.
std::optional<planner_decision> at(planner& p, const planner_sample& s) {
  p.observe(s);
  return p.decide(s.at);
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

} // namespace

TEST(planner, waits_an_interval_after_the_first_sample_then_scales_prefill_on_ttft) {
  planner p(test_config(), {});
  auto s = neutral(0s, 1, 1);
  s.ttft_p90_ms = 1800;
  EXPECT_FALSE(at(p, s)); // no window measured yet
  s.at = t0 + 4999ms;
  EXPECT_FALSE(at(p, s));
  s.at = t0 + 5s;
  auto d = at(p, s);
  ASSERT_EQ(summary(d), "scale_up_prefill: prefill 2, decode 1");
  EXPECT_TRUE(d->switches.empty());
  EXPECT_FALSE(d->decode_batch_cap);
  EXPECT_TRUE(has(d->reason, "TTFT p90 over target: prefill 1 -> 2, decode 1 -> 1")) << d->reason;
  EXPECT_TRUE(has(d->reason, "TTFT p90 1800 ms (target 1000 ms), TPOT p90 60 ms (target 100 ms)"))
      << d->reason;
  EXPECT_EQ(p.decisions().at("scale_up_prefill"), 1u);
  EXPECT_EQ(p.decisions().at("scale_up_decode"), 0u);
}

TEST(planner, evaluates_once_per_interval) {
  planner p(test_config(), {});
  p.observe(neutral(0s, 1, 1));
  EXPECT_FALSE(p.decide(t0 + 5s)); // evaluated: nothing to do; the next look is at 10 s
  auto hot = neutral(6s, 1, 1);
  hot.tpot_p90_ms = 150;
  EXPECT_FALSE(at(p, hot));
  hot.at = t0 + 9999ms;
  EXPECT_FALSE(at(p, hot));
  hot.at = t0 + 10s;
  auto d = at(p, hot);
  ASSERT_EQ(summary(d), "scale_up_decode: prefill 1, decode 2");
}

TEST(planner, holds_while_a_change_is_in_progress_and_for_the_cooldown_after_it_ends) {
  planner p(test_config(), {});
  auto s = neutral(0s, 1, 1);
  s.ttft_p90_ms = 1800;
  p.observe(s);
  ASSERT_TRUE(p.decide(t0 + 5s));
  // The new instance takes 15 s to start: no decision meanwhile, however late.
  s.prefill = {1, 1, 0};
  for (auto t : {6s, 12s, 20s}) {
    s.at = t0 + t;
    EXPECT_FALSE(at(p, s)) << t.count();
  }
  // Started at 21 s; the last sample with it starting was at 20 s: cooldown until 30 s.
  s.prefill = {2, 0, 0};
  s.at = t0 + 21s;
  EXPECT_FALSE(at(p, s));
  s.at = t0 + 29999ms;
  EXPECT_FALSE(at(p, s));
  s.at = t0 + 30s;
  auto d = at(p, s);
  ASSERT_EQ(summary(d), "scale_up_prefill: prefill 3, decode 1");
  // A draining instance holds too (any role).
  s.prefill = {3, 0, 0};
  s.decode = {1, 0, 1};
  s.at = t0 + 60s;
  EXPECT_FALSE(at(p, s));
}

TEST(planner, cooldown_also_runs_from_the_decision_when_no_sample_shows_the_change) {
  planner p(test_config(), {});
  auto s = neutral(0s, 1, 1);
  s.ttft_p90_ms = 1800;
  p.observe(s);
  ASSERT_TRUE(p.decide(t0 + 5s));
  s.prefill.serving = 2; // already serving at the next sample
  s.at = t0 + 14999ms;
  EXPECT_FALSE(at(p, s));
  s.at = t0 + 15s;
  auto d = at(p, s);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->target_counts, (counts{{"prefill", 3}, {"decode", 1}}));
}

TEST(planner, helps_the_role_further_over_its_target_first) {
  auto s = neutral(0s, 1, 1);
  s.ttft_p90_ms = 1500; // 1.5 x target
  s.tpot_p90_ms = 200;  // 2 x target
  auto d = first_decision(s);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->action, "scale_up_decode");
  EXPECT_TRUE(has(d->reason, "TPOT p90 over target: prefill 1 -> 1, decode 1 -> 2")) << d->reason;
}

TEST(planner, kv_usage_over_kv_high_scales_decode) {
  auto s = neutral(0s, 1, 2);
  s.decode_kv_usage = 0.9;
  auto d = first_decision(s);
  ASSERT_EQ(summary(d), "scale_up_decode: prefill 1, decode 3");
  EXPECT_TRUE(has(d->reason, "KV usage over kv_high: ")) << d->reason;
}

TEST(planner, never_goes_over_a_max) {
  auto s = neutral(0s, 4, 1);
  s.ttft_p90_ms = 5000; // prefill at max_prefill: nothing to do for it
  EXPECT_FALSE(first_decision(s));
  // The other role over its target still gets its instance.
  s.tpot_p90_ms = 120;
  auto d = first_decision(s);
  ASSERT_EQ(summary(d), "scale_up_decode: prefill 4, decode 2");
}

TEST(planner, at_max_total_switches_an_instance_from_a_role_well_under_target) {
  auto c = test_config();
  c.max_total = 4;
  {
    auto s = neutral(0s, 2, 2);
    s.tpot_p90_ms = 200;
    s.ttft_p90_ms = 300; // under 0.5 x target, no prompt tokens waiting
    auto d = first_decision(s, c);
    ASSERT_EQ(summary(d), "switch_p_to_d: prefill 1, decode 3");
    ASSERT_EQ(d->switches.size(), 1u);
    EXPECT_EQ(d->switches[0].from, "prefill");
    EXPECT_EQ(d->switches[0].to, "decode");
    EXPECT_EQ(d->switches[0].count, 1);
    EXPECT_TRUE(has(d->reason, "TPOT p90 over target at max_total (4) and prefill well under "
                               "target: prefill 2 -> 1, decode 2 -> 3"))
        << d->reason;
  }
  {
    auto s = neutral(0s, 2, 2);
    s.ttft_p90_ms = 2500;
    s.queued = 3; // queued requests do not keep decode from giving an instance away
    s.tpot_p90_ms = 30;
    s.decode_kv_usage = 0.1;
    auto d = first_decision(s, c);
    ASSERT_EQ(summary(d), "switch_d_to_p: prefill 3, decode 1");
    ASSERT_EQ(d->switches.size(), 1u);
    EXPECT_EQ(d->switches[0].from, "decode");
    EXPECT_EQ(d->switches[0].to, "prefill");
  }
  {
    // The other role merely under target (0.6 x): no switch, nothing.
    auto s = neutral(0s, 2, 2);
    s.tpot_p90_ms = 200;
    EXPECT_FALSE(first_decision(s, c));
  }
  {
    // A donor whose queue grows is over target itself: nothing.
    planner p(c, {});
    auto s = neutral(0s, 2, 2);
    s.ttft_p90_ms = 300;
    s.queued = 1;
    p.observe(s);
    EXPECT_FALSE(p.decide(t0 + 5s));
    s.tpot_p90_ms = 200;
    s.queued = 3;
    s.at = t0 + 10s;
    EXPECT_FALSE(at(p, s));
  }
  {
    // The donor at its min: nothing either.
    auto s = neutral(0s, 1, 3);
    s.tpot_p90_ms = 200;
    s.ttft_p90_ms = 100;
    EXPECT_FALSE(first_decision(s, c));
  }
}

TEST(planner, scales_prefill_down_one_step_only_when_well_under_target_and_idle) {
  auto s = neutral(0s, 3, 1);
  s.ttft_p90_ms = 400;
  auto d = first_decision(s);
  ASSERT_EQ(summary(d), "scale_down_prefill: prefill 2, decode 1");
  EXPECT_TRUE(has(d->reason, "TTFT p90 under 0.5 x target and idle: prefill 3 -> 2")) << d->reason;
  s.ttft_p90_ms.reset(); // nothing finished in the window: as idle as it gets
  EXPECT_EQ(first_decision(s)->action, "scale_down_prefill");
  // Hysteresis: under the target but not under half of it.
  s.ttft_p90_ms = 600;
  EXPECT_FALSE(first_decision(s));
  s.ttft_p90_ms = 400;
  s.queued = 1;
  EXPECT_FALSE(first_decision(s));
  // Two instances must take the waiting prompt tokens in a step each: 2 x 2048.
  s.queued = 0;
  s.prefill_outstanding_tokens = 4097;
  EXPECT_FALSE(first_decision(s));
  s.prefill_outstanding_tokens = 4096;
  EXPECT_EQ(first_decision(s)->action, "scale_down_prefill");
  // At min_prefill it stays.
  auto at_min = neutral(0s, 1, 1);
  at_min.ttft_p90_ms = 100;
  at_min.tpot_p90_ms = 10;
  at_min.decode_kv_usage = 0;
  EXPECT_FALSE(first_decision(at_min));
}

TEST(planner, with_scale_down_after_a_role_must_stay_idle_that_long_before_it_shrinks) {
  auto c = test_config();
  c.scale_down_after = 12s; // the third evaluation after the first idle one
  planner p(c, {});
  auto idle = neutral(0s, 3, 1);
  idle.ttft_p90_ms = 400;
  auto busy = idle;
  busy.ttft_p90_ms = 600; // under target, not well under: not idle
  auto at = [](planner_sample s, std::chrono::seconds t) {
    s.at = t0 + t;
    return s;
  };
  p.observe(at(idle, 0s));
  EXPECT_FALSE(p.decide(t0 + 5s)) << "idle since 5 s";
  p.observe(at(busy, 9s));
  EXPECT_FALSE(p.decide(t0 + 10s)) << "not idle: the clock starts again";
  p.observe(at(idle, 14s));
  EXPECT_FALSE(p.decide(t0 + 15s)) << "idle since 14 s";
  p.observe(at(idle, 19s));
  EXPECT_FALSE(p.decide(t0 + 20s)) << "5 s of 12";
  p.observe(at(idle, 24s));
  EXPECT_FALSE(p.decide(t0 + 25s)) << "10 s of 12";
  p.observe(at(idle, 29s));
  EXPECT_EQ(summary(p.decide(t0 + 30s)), "scale_down_prefill: prefill 2, decode 1")
      << "idle at every evaluation for 15 s";
}

TEST(planner, scales_decode_down_only_when_the_others_can_take_its_sequences) {
  auto s = neutral(0s, 1, 3);
  s.tpot_p90_ms = 40;
  s.decode_kv_usage = 0.3; // 0.45 on two instances: under kv_low 0.5
  auto d = first_decision(s);
  ASSERT_EQ(summary(d), "scale_down_decode: prefill 1, decode 2");
  EXPECT_TRUE(has(d->reason, "TPOT p90 under 0.5 x target and KV usage 0.45 after a drain"))
      << d->reason;
  s.decode_kv_usage = 0.34; // 0.51 after a drain
  EXPECT_FALSE(first_decision(s));
  s.decode_kv_usage = 0.3;
  s.decode_running = 129; // more than two batches of 64
  EXPECT_FALSE(first_decision(s));
  s.decode_running = 128;
  EXPECT_EQ(first_decision(s)->action, "scale_down_decode");
  s.tpot_p90_ms = 50; // not under half of the target
  EXPECT_FALSE(first_decision(s));
}

TEST(planner, idle_roles_scale_down_one_at_a_time_the_idler_first) {
  auto s = neutral(0s, 2, 2);
  s.ttft_p90_ms = 200;
  s.tpot_p90_ms = 10;
  s.decode_kv_usage = 0.05;
  s.decode_running = 1;
  auto d = first_decision(s);
  ASSERT_EQ(summary(d),
            "scale_down_decode: prefill 2, decode 1"); // 0.1 of target against prefill's 0.2
}

TEST(planner, no_scale_down_while_another_role_is_over_target) {
  auto s = neutral(0s, 2, 4);
  s.ttft_p90_ms = 200; // prefill idle ...
  s.tpot_p90_ms = 300; // ... but decode over target and at max_decode
  EXPECT_FALSE(first_decision(s));
}

TEST(planner, brings_counts_outside_the_bounds_back_one_step_at_a_time) {
  auto c = test_config();
  c.min_decode = 2;
  {
    auto d = first_decision(neutral(0s, 1, 1), c);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->action, "scale_up_decode");
    EXPECT_TRUE(has(d->reason, "below min_decode (2): prefill 1 -> 1, decode 1 -> 2")) << d->reason;
  }
  {
    auto d = first_decision(neutral(0s, 6, 2), c);
    ASSERT_EQ(summary(d), "scale_down_prefill: prefill 5, decode 2");
    EXPECT_TRUE(has(d->reason, "above max_prefill (4)")) << d->reason;
  }
  {
    c.max_total = 5;
    auto s = neutral(0s, 3, 3);
    s.tpot_p90_ms = 150; // decode needs its instances more: prefill gives one up
    auto d = first_decision(s, c);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->action, "scale_down_prefill");
    EXPECT_TRUE(has(d->reason, "above max_total (5): prefill 3 -> 2")) << d->reason;
  }
  {
    // Below a min at max_total: the other role gives one.
    c.max_total = 4;
    auto d = first_decision(neutral(0s, 3, 1), c);
    ASSERT_EQ(summary(d), "switch_p_to_d: prefill 2, decode 2");
  }
}

TEST(planner, a_growing_queue_scales_prefill_unless_every_decode_batch_is_full) {
  planner p(test_config(), {});
  auto s = neutral(0s, 1, 2);
  s.queued = 2;
  p.observe(s);
  EXPECT_FALSE(p.decide(t0 + 5s)); // no earlier queue to compare with
  s.queued = 5;
  s.at = t0 + 10s;
  auto d = at(p, s);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->action, "scale_up_prefill");
  EXPECT_TRUE(has(d->reason, "queue growing: prefill 1 -> 2")) << d->reason;
  EXPECT_TRUE(has(d->reason, "queued 5 (was 2)")) << d->reason;

  s.at = t0;
  s.decode_running = 128; // 2 x 64: every slot taken
  auto e = first_decision(s);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->action, "scale_up_decode");
  EXPECT_TRUE(has(e->reason, "every batch full, requests queued: prefill 1 -> 1, decode 2 -> 3"))
      << e->reason;
}

TEST(planner, disabled_never_decides) {
  auto c = test_config();
  c.enabled = false;
  planner p(c, {});
  auto s = neutral(0s, 1, 1);
  s.ttft_p90_ms = 9000;
  p.observe(s);
  EXPECT_FALSE(p.decide(t0 + 60s));
}

TEST(planner, renders_its_decisions_counter_for_metrics) {
  planner p(test_config(), {});
  auto s = neutral(0s, 1, 1);
  s.ttft_p90_ms = 1800;
  p.observe(s);
  ASSERT_TRUE(p.decide(t0 + 5s));
  const std::string text = render_planner_metrics(p);
  EXPECT_TRUE(has(text, "# TYPE supernode_planner_decisions_total counter\n")) << text;
  EXPECT_TRUE(has(text, "supernode_planner_decisions_total{action=\"scale_up_prefill\"} 1\n"))
      << text;
  EXPECT_TRUE(has(text, "supernode_planner_decisions_total{action=\"switch_p_to_d\"} 0\n")) << text;
  // Rendering again counts nothing twice.
  EXPECT_EQ(render_planner_metrics(p), text);
  size_t series = 0;
  for (size_t at = text.find("supernode_planner_decisions_total{"); at != std::string::npos;
       at = text.find("supernode_planner_decisions_total{", at + 1))
    ++series;
  EXPECT_EQ(series, planner_actions().size());
}
