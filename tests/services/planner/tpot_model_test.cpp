// The TPOT line behind the batch cap: a least-squares fit of (batch, TPOT p90) pairs, no fit
// until the batches spread, the oldest pairs forgotten, and the cap it gives within its bounds.

#include "services/planner/tpot_model.hpp"

#include <cmath>
#include <gtest/gtest.h>

using supernode::services::planner::tpot_model;

TEST(tpot_model, fits_the_least_squares_line) {
  tpot_model m;
  // Noisy points around 10 + 3 * batch: the fit of these four is 10.5 + 2.95 * batch.
  m.add(2, 16);
  m.add(4, 23);
  m.add(6, 28);
  m.add(8, 34);
  auto line = m.fit();
  ASSERT_TRUE(line);
  EXPECT_NEAR(line->fixed_ms, 10.5, 1e-9);
  EXPECT_NEAR(line->per_seq_ms, 2.95, 1e-9);
  EXPECT_NEAR(line->at(10), 40, 1e-9);
  // (100 - 10.5) / 2.95 = 30.3: 30 sequences.
  EXPECT_EQ(m.cap_for(100, 64), 30);
  EXPECT_EQ(m.cap_for(100, 20), 20);
}

TEST(tpot_model, needs_batches_a_sequence_apart) {
  tpot_model m;
  m.add(4, 30);
  EXPECT_FALSE(m.fit());
  m.add(4.5, 31);
  EXPECT_FALSE(m.fit()); // half a sequence apart: the slope would be noise
  EXPECT_FALSE(m.cap_for(100, 64));
  m.add(5, 33);
  EXPECT_TRUE(m.fit());
  // Nothing learnt from an empty batch or a TPOT that is not a number.
  tpot_model n;
  n.add(0, 10);
  n.add(-1, 10);
  n.add(3, std::nan(""));
  EXPECT_EQ(n.size(), 0u);
}

TEST(tpot_model, forgets_the_oldest_pairs) {
  tpot_model m(4);
  // An old workload: 10 + 1 * batch ...
  for (int b : {1, 3, 5, 7}) m.add(b, 10 + b);
  EXPECT_NEAR(m.fit()->per_seq_ms, 1, 1e-9);
  // ... replaced by longer contexts: 10 + 4 * batch.
  for (int b : {2, 4, 6, 8}) m.add(b, 10 + 4 * b);
  EXPECT_EQ(m.size(), 4u);
  EXPECT_NEAR(m.fit()->per_seq_ms, 4, 1e-9);
  EXPECT_EQ(m.cap_for(50, 64), 10);
}
