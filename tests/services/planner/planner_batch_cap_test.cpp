// The planner's TPOT-constrained batch cap (batch_cap = true): the cap comes from the line
// fitted to observed (batch per instance, TPOT p90) pairs, is lowered as soon as the line says
// the current cap misses the target (instead of a decode scale-up, which takes seconds), raised
// only while the target is met and at most doubled per step, and rides along with a count change.

#include "planner_samples.hpp"

#include <gtest/gtest.h>

using namespace supernode::services::planner;
using namespace supernode::services::planner::testing;

namespace {

planner_config with_batch_cap() {
  auto c = test_config();
  c.batch_cap = true;
  return c;
}

// Samples on the line tpot = fixed + per_seq * batch, one per second from `from`, one decode
// instance running each batch in turn.
void feed_line(planner& p, std::chrono::seconds from, double fixed, double per_seq,
               std::initializer_list<int> batches, int64_t cap_now) {
  auto t = from;
  for (int batch : batches) {
    auto s = neutral(t, 1, 1);
    s.decode_running = batch;
    s.tpot_p90_ms = fixed + per_seq * batch;
    s.decode_batch_cap = cap_now;
    p.observe(s);
    t += 1s;
  }
}

} // namespace

TEST(planner_batch_cap, lowers_the_cap_to_the_largest_batch_the_line_keeps_within_target) {
  planner p(with_batch_cap(), {.decode_max_batch = 64});
  EXPECT_FALSE(p.fitted_batch_cap()); // no pairs yet
  // tpot = 20 + 5 * batch: 100 ms at 16 sequences.
  feed_line(p, 0s, 20, 5, {4, 8, 12, 18}, 64);
  EXPECT_EQ(p.fitted_batch_cap(), 16);
  auto d = p.decide(t0 + 5s); // the last sample: batch 18, TPOT 110 ms, over target
  // The cap answers the TPOT: no decode instance is added for it, the counts stay.
  ASSERT_EQ(summary(d), "set_batch_cap: prefill 1, decode 1");
  EXPECT_EQ(d->decode_batch_cap, 16);
  EXPECT_NE(d->reason.find("TPOT line predicts the batch cap misses the target: prefill 1 -> 1, "
                           "decode 1 -> 1, batch cap 64 -> 16"),
            std::string::npos)
      << d->reason;
  EXPECT_EQ(p.decisions().at("set_batch_cap"), 1u);
  // With the cap applied, nothing more to do; no cooldown either (the counts did not change).
  auto s = neutral(10s, 1, 1);
  s.decode_running = 16;
  s.tpot_p90_ms = 100;
  s.decode_batch_cap = 16;
  p.observe(s);
  EXPECT_FALSE(p.decide(t0 + 10s));
}

TEST(planner_batch_cap, lowers_by_a_single_sequence_too) {
  // A cap one over what the line allows misses the target at a full batch: lowered at once.
  planner p(with_batch_cap(), {.decode_max_batch = 64});
  feed_line(p, 0s, 20, 5, {4, 8, 12}, 17);
  auto d = p.decide(t0 + 5s);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->decode_batch_cap, 16);
}

TEST(planner_batch_cap, never_leaves_one_to_max_batch) {
  {
    // Even one sequence is predicted over the target: 1.
    planner p(with_batch_cap(), {.decode_max_batch = 64});
    feed_line(p, 0s, 150, 5, {1, 4, 8}, 64);
    EXPECT_EQ(p.fitted_batch_cap(), 1);
  }
  {
    // TPOT does not grow with the batch: capping would not help, max_batch.
    planner p(with_batch_cap(), {.decode_max_batch = 32});
    feed_line(p, 0s, 50, 0, {2, 6, 10}, 32);
    EXPECT_EQ(p.fitted_batch_cap(), 32);
  }
}

TEST(planner_batch_cap, raises_the_cap_only_while_the_target_is_met_and_at_most_double) {
  planner p(with_batch_cap(), {.decode_max_batch = 64});
  // tpot = 20 + 2 * batch: the line allows 40, the instances run with a cap of 8.
  feed_line(p, 0s, 20, 2, {2, 4, 6, 8}, 8);
  EXPECT_EQ(p.fitted_batch_cap(), 40);
  auto d = p.decide(t0 + 5s);
  ASSERT_EQ(summary(d), "set_batch_cap: prefill 1, decode 1");
  EXPECT_EQ(d->decode_batch_cap, 16);
  EXPECT_NE(d->reason.find("TPOT line allows a larger batch within the target"), std::string::npos)
      << d->reason;
  // A target missed (the TPOT of other causes, not on the line) raises nothing.
  planner q(with_batch_cap(), {.decode_max_batch = 64});
  feed_line(q, 0s, 20, 2, {2, 4, 6, 8}, 8);
  auto missed = neutral(4s, 1, 1);
  missed.decode_running = 8;
  missed.tpot_p90_ms = 101;
  missed.decode_batch_cap = 8;
  q.observe(missed);
  auto e = q.decide(t0 + 5s);
  ASSERT_EQ(summary(e), "scale_up_decode: prefill 1, decode 2");
  EXPECT_FALSE(e->decode_batch_cap);
}

TEST(planner_batch_cap, small_raises_wait_so_the_cap_does_not_move_every_interval) {
  planner p(with_batch_cap(), {.decode_max_batch = 64});
  // tpot = 20 + 2 * batch allows 40; from 37 that is less than an eighth (4) more: kept.
  feed_line(p, 0s, 20, 2, {2, 4, 6}, 37);
  EXPECT_EQ(p.fitted_batch_cap(), 40);
  EXPECT_FALSE(p.decide(t0 + 5s));
  // From 36 it is an eighth more: raised.
  planner q(with_batch_cap(), {.decode_max_batch = 64});
  feed_line(q, 0s, 20, 2, {2, 4, 6}, 36);
  auto d = q.decide(t0 + 5s);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->decode_batch_cap, 40);
}

TEST(planner_batch_cap, rides_along_with_a_count_change) {
  planner p(with_batch_cap(), {.decode_max_batch = 64});
  feed_line(p, 0s, 20, 5, {4, 8, 12}, 64);
  auto s = neutral(3s, 1, 1);
  s.decode_running = 18;
  s.tpot_p90_ms = 110;
  s.decode_kv_usage = 0.95; // the KV is full as well: more decode, with the lower cap
  p.observe(s);
  auto d = p.decide(t0 + 5s);
  ASSERT_EQ(summary(d), "scale_up_decode: prefill 1, decode 2");
  EXPECT_EQ(d->decode_batch_cap, 16);
  EXPECT_EQ(p.decisions().at("set_batch_cap"), 0u);
}

TEST(planner_batch_cap, off_leaves_the_cap_alone_and_scales_decode_for_tpot) {
  planner p(test_config(), {.decode_max_batch = 64});
  feed_line(p, 0s, 20, 5, {4, 8, 12, 18}, 64);
  EXPECT_FALSE(p.fitted_batch_cap());
  auto d = p.decide(t0 + 5s);
  ASSERT_EQ(summary(d), "scale_up_decode: prefill 1, decode 2");
  EXPECT_FALSE(d->decode_batch_cap);
}

TEST(planner_batch_cap, learns_nothing_while_the_instance_set_changes) {
  planner p(with_batch_cap(), {.decode_max_batch = 64});
  for (int batch : {4, 8, 12}) {
    auto s = neutral(std::chrono::seconds(batch), 1, 1);
    s.decode = {1, 1, 0}; // one starting: the mean batch per instance is skewed
    s.decode_running = batch;
    s.tpot_p90_ms = 20 + 5 * batch;
    p.observe(s);
  }
  EXPECT_FALSE(p.fitted_batch_cap());
}
