// The planner against a scripted latency feed: a step load (1 → 6 → 1 requests/s, the issue's
// schedule) on a tiny queueing model of a PD cluster, one sample and one decide() per second.
// Instances take 2 s to start and 1 s to drain, so decisions meet changes in progress. The
// planner must scale up under the high rate and back down after it, one step at a time, never
// outside its bounds, never while a change is in progress or within its cooldown; the exact
// decisions are checked, so a changed rule shows here.

#include "planner_samples.hpp"
#include "services/planner/rate_schedule.hpp"

#include <algorithm>
#include <functional>
#include <gtest/gtest.h>

using namespace supernode::services::planner;
using namespace supernode::services::planner::testing;

namespace {

// A fluid model of the cluster: prefill instances serve 2 requests/s each (a backlog waits in
// the queue), decode instances 2.5 requests/s each; latencies grow like an M/M/1 queue's as
// the utilisation nears 1.
class cluster_model {
public:
  static constexpr double prefill_ms = 200, decode_ms = 35;
  // Requests per second one instance serves: longer prompts lower the first, longer answers
  // the second.
  double prefill_rate = 2, decode_rate = 2.5;

  // One second at `rate` requests/s; the counts apply from now on.
  void step(double rate) {
    arrivals_ = rate;
    const double capacity = prefill_.serving * prefill_rate;
    backlog_ = std::max(0.0, backlog_ + rate - capacity);
    // Changes in progress finish after their time.
    auto finish = [](int& pending, int& left, int& serving, int add) {
      if (pending > 0 && --left == 0) serving += add * pending, pending = 0;
    };
    finish(prefill_.starting, prefill_start_left_, prefill_.serving, 1);
    finish(decode_.starting, decode_start_left_, decode_.serving, 1);
    int none = 0;
    finish(prefill_.draining, prefill_drain_left_, none, 0);
    finish(decode_.draining, decode_drain_left_, none, 0);
  }

  planner_sample sample(planner::clock::time_point at) const {
    planner_sample s;
    s.at = at;
    s.prefill = prefill_;
    s.decode = decode_;
    const double rho_p = std::min(arrivals_ / (prefill_.serving * prefill_rate), 0.95);
    s.ttft_p90_ms = prefill_ms / (1 - rho_p) + 1000 * backlog_ / (prefill_.serving * prefill_rate);
    const double rho_d = std::min(arrivals_ / (decode_.serving * decode_rate), 0.95);
    s.tpot_p90_ms = decode_ms / (1 - rho_d);
    s.queued = static_cast<int64_t>(backlog_);
    s.prefill_outstanding_tokens = static_cast<int64_t>(backlog_ * 500);
    s.decode_kv_usage = std::min(1.0, 0.1 * arrivals_ / decode_.serving);
    s.decode_running = static_cast<int64_t>(2 * arrivals_);
    s.decode_batch_cap = 64;
    return s;
  }

  // What the scale operation does with a decision: new instances start, removed ones drain.
  void apply(const planner_decision& d) {
    // A switched instance drains from its role and starts in the other, like any other change.
    auto change = [](role_counts& r, int target, int& start_left, int& drain_left) {
      if (target > r.serving + r.starting) r.starting = target - r.serving, start_left = 2;
      if (target < r.serving) r.draining = r.serving - target, r.serving = target, drain_left = 1;
    };
    change(prefill_, d.target_counts.at("prefill"), prefill_start_left_, prefill_drain_left_);
    change(decode_, d.target_counts.at("decode"), decode_start_left_, decode_drain_left_);
  }

private:
  role_counts prefill_{1, 0, 0}, decode_{1, 0, 0};
  int prefill_start_left_ = 0, decode_start_left_ = 0;
  int prefill_drain_left_ = 0, decode_drain_left_ = 0;
  double arrivals_ = 0, backlog_ = 0;
};

struct event {
  int second;
  std::string action;
  int prefill, decode;
  bool operator==(const event&) const = default;
};

std::ostream& operator<<(std::ostream& os, const event& e) {
  return os << "{" << e.second << ", \"" << e.action << "\", " << e.prefill << ", " << e.decode
            << "}";
}

// Runs the planner on the cluster for `seconds`, one sample and decision per second at the
// schedule's rate (`shift` may change the workload first), applying each decision. Checks the
// rules every decision must keep and returns the decisions.
std::vector<event> run(const planner_config& config, cluster_model& cluster,
                       const rate_schedule& schedule, int seconds,
                       const std::function<void(int, cluster_model&)>& shift = {}) {
  planner p(config, {});
  std::vector<event> events;
  auto last_change = planner::clock::time_point::min();
  auto last_busy = planner::clock::time_point::min();
  for (int second = 0; second <= seconds; ++second) {
    if (shift) shift(second, cluster);
    cluster.step(schedule.rate_at(second));
    const auto now = t0 + std::chrono::seconds(second);
    const planner_sample s = cluster.sample(now);
    const bool busy = s.prefill.changing() || s.decode.changing();
    if (busy) last_busy = now;
    p.observe(s);
    auto d = p.decide(now);
    if (!d) continue;
    // Never while a change is in progress, nor within the cooldown after one.
    EXPECT_FALSE(busy) << second;
    if (last_change != planner::clock::time_point::min()) {
      EXPECT_GE(now - last_change, config.cooldown) << second;
      EXPECT_GE(now - last_busy, config.cooldown) << second;
    }
    // One instance added, removed or switched; within every bound.
    const int prefill = d->target_counts.at("prefill"), decode = d->target_counts.at("decode");
    EXPECT_EQ(std::abs(prefill - s.prefill.serving) + std::abs(decode - s.decode.serving),
              d->switches.empty() ? 1 : 2)
        << second;
    EXPECT_GE(prefill, config.min_prefill) << second;
    EXPECT_LE(prefill, config.max_prefill) << second;
    EXPECT_GE(decode, config.min_decode) << second;
    EXPECT_LE(decode, config.max_decode) << second;
    EXPECT_LE(prefill + decode, config.total_cap()) << second;
    events.push_back({second, d->action, prefill, decode});
    last_change = now;
    cluster.apply(*d);
  }
  EXPECT_EQ(p.decisions().at("scale_up_prefill") + p.decisions().at("scale_up_decode") +
                p.decisions().at("scale_down_prefill") + p.decisions().at("scale_down_decode") +
                p.decisions().at("switch_p_to_d") + p.decisions().at("switch_d_to_p"),
            events.size());
  return events;
}

} // namespace

TEST(planner_step_load, scales_up_for_the_high_rate_and_back_down_within_its_bounds) {
  cluster_model cluster;
  const auto events = run(test_config(), cluster, rate_schedule::parse("0:1,60:6,180:1"), 300);
  const std::vector<event> expected = {
      // 6 requests/s from 60 s. Decode first (TPOT 700 ms: 7 x its target, TTFT 6 x), then
      // prefill while its backlog grows (TTFT 28 s at 71 s), then decode again. One step each
      // time the last has started (1 s) and the cooldown (10 s) has passed.
      {60, "scale_up_decode", 1, 2},
      {71, "scale_up_prefill", 2, 2},
      {82, "scale_up_prefill", 3, 2},
      {93, "scale_up_prefill", 4, 2},
      {104, "scale_up_decode", 4, 3},
      {115, "scale_up_decode", 4, 4},
      // 1 request/s from 180 s, the backlog long gone: one instance back per cooldown, the
      // idler role first (TTFT 0.23 x target against TPOT 0.39 x), down to the minima.
      {181, "scale_down_prefill", 3, 4},
      {191, "scale_down_prefill", 2, 4},
      {201, "scale_down_prefill", 1, 4},
      {211, "scale_down_decode", 1, 3},
      {221, "scale_down_decode", 1, 2},
      {231, "scale_down_decode", 1, 1},
  };
  EXPECT_EQ(events, expected);
  const auto last = cluster.sample(t0 + 300s);
  EXPECT_EQ(last.prefill.serving, 1);
  EXPECT_EQ(last.decode.serving, 1);
}

TEST(planner_step_load, switches_roles_when_the_load_moves_from_prompts_to_answers_at_max_total) {
  // 3 requests/s throughout, four instances at most. Long prompts and short answers first, then
  // from 100 s short prompts and long answers.
  auto config = test_config();
  config.max_total = 4;
  config.max_prefill = config.max_decode = 3;
  cluster_model cluster;
  const auto shift = [](int second, cluster_model& c) {
    const bool prompts = second < 100;
    c.prefill_rate = prompts ? 1.2 : 12;
    c.decode_rate = prompts ? 12 : 1.2;
  };
  const auto events = run(config, cluster, rate_schedule::parse("0:3"), 250, shift);
  const std::vector<event> expected = {
      // Prompts: prefill up to what the cap leaves (1.2 requests/s each against 3).
      {5, "scale_up_prefill", 2, 1},
      {16, "scale_up_prefill", 3, 1},
      // Answers: decode over target at max_total while prefill idles (TTFT 0.22 x target): one
      // prefill instance becomes a decode instance, then another (prefill at its min).
      {102, "switch_p_to_d", 2, 2},
      {113, "switch_p_to_d", 1, 3},
  };
  EXPECT_EQ(events, expected);
  const auto last = cluster.sample(t0 + 250s);
  EXPECT_EQ(last.prefill.serving, 1);
  EXPECT_EQ(last.decode.serving, 3);
}
