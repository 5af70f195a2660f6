// The serving values that size allocations, checked against the model before a role allocates:
// a KV pool or a batch's logits larger than the machine names its key, value and bytes.

#include "model/checkpoint_maker.hpp"
#include "services/serving/serving_config.hpp"

#include <gtest/gtest.h>

using namespace supernode;

namespace {

constexpr uint64_t gib = uint64_t{1} << 30;

std::string error_of(const services::serving_config& s, uint64_t memory) {
  try {
    s.check_sizes(model::preset_config("tiny"), memory);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(serving_config, default_sizes_fit_a_small_machine) {
  EXPECT_EQ(error_of(services::serving_config{}, 2 * gib), "");
}

TEST(serving_config, a_kv_pool_larger_than_memory_names_its_key) {
  // tiny: 4 layers x 16 tokens x (64 + 16) floats = 20480 bytes per block.
  services::serving_config s;
  s.decode_kv_blocks = int64_t{1} << 24;
  auto msg = error_of(s, 64 * gib);
  EXPECT_NE(msg.find("[decode] kv_blocks = 16777216 asks for 320.0 GiB (KV pool, 20480 bytes per "
                     "block: 4 layers x 16 tokens x 80 floats), more than the 64.0 GiB"),
            std::string::npos)
      << msg;
  s.decode_kv_blocks = 2048;
  s.prefill_kv_blocks = int64_t{1} << 24;
  msg = error_of(s, 64 * gib);
  EXPECT_NE(msg.find("[prefill] kv_blocks = 16777216 asks for 320.0 GiB"), std::string::npos)
      << msg;
  // 0 derives the pool from the budget and max_context: the message says so.
  s.prefill_kv_blocks = 0;
  s.max_context = int64_t{1} << 20;
  s.prefill_token_budget = int64_t{1} << 20;
  msg = error_of(s, 1 * gib);
  EXPECT_NE(msg.find("[prefill] kv_blocks (0: from token_budget and [model] max_context) = 131136"),
            std::string::npos)
      << msg;
}

TEST(serving_config, a_batch_whose_logits_exceed_memory_names_max_batch) {
  services::serving_config s;
  s.decode_max_batch = 4096; // x 129280 vocab x 4 bytes = 2.0 GiB of logits per step
  auto msg = error_of(s, 1 * gib);
  EXPECT_NE(msg.find("[decode] max_batch = 4096 asks for 2.0 GiB (one step's logits"),
            std::string::npos)
      << msg;
  EXPECT_EQ(error_of(s, 4 * gib), "");
}
