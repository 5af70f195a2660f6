// [planner] in a cluster file: off by default, every key read, and a value out of range or
// against another key rejected with the file, line, table and key.

#include "services/serving/cluster_file.hpp"

#include <gtest/gtest.h>

using namespace std::chrono_literals;
using supernode::services::cluster_file;

namespace {

constexpr const char* shape = "[process.all]\nroles = [\"gateway\"]\n";
// A shape the planner can plan (lines 1-9): prefill and decode in kinds of their own.
constexpr const char* planned_shape = "[process.gateway]\nroles = [\"gateway\", \"scheduler\"]\n"
                                      "[process.prefill]\nroles = [\"prefill\"]\ncount = 3\n"
                                      "[process.decode]\nroles = [\"decode\"]\ncount = 6\n"
                                      "per_process = 1\n";

std::string error_of(const std::string& tables, const char* topology = shape) {
  try {
    cluster_file::parse(std::string(topology) + tables, "x.toml");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(planner_config, is_off_by_default) {
  const auto p = cluster_file::parse(shape, "x.toml").serving.planner;
  EXPECT_FALSE(p.enabled);
  EXPECT_EQ(p.ttft_ms, 1000);
  EXPECT_EQ(p.tpot_ms, 100);
  EXPECT_EQ(p.interval, 5000ms);
  EXPECT_EQ(p.cooldown, 10000ms);
  EXPECT_EQ(p.scale_down_after, 0ms);
  EXPECT_EQ(p.total_cap(), 8); // max_total = 0: max_prefill + max_decode
  EXPECT_FALSE(p.batch_cap);
}

TEST(planner_config, reads_every_key) {
  const auto p = cluster_file::parse(std::string(planned_shape) +
                                         "[planner]\nenabled = true\nttft_ms = 800\ntpot_ms = 50\n"
                                         "interval_ms = 2000\nmin_prefill = 2\nmax_prefill = 3\n"
                                         "min_decode = 1\nmax_decode = 6\nmax_total = 7\n"
                                         "cooldown_ms = 0\nscale_down_after_ms = 8000\n"
                                         "scale_down_below = 0.4\n"
                                         "kv_high = 0.9\nkv_low = 0.3\nbatch_cap = true\n",
                                     "x.toml")
                     .serving.planner;
  EXPECT_TRUE(p.enabled);
  EXPECT_EQ(p.ttft_ms, 800);
  EXPECT_EQ(p.tpot_ms, 50);
  EXPECT_EQ(p.interval, 2000ms);
  EXPECT_EQ(p.min_prefill, 2);
  EXPECT_EQ(p.max_prefill, 3);
  EXPECT_EQ(p.min_decode, 1);
  EXPECT_EQ(p.max_decode, 6);
  EXPECT_EQ(p.max_total, 7);
  EXPECT_EQ(p.total_cap(), 7);
  EXPECT_EQ(p.cooldown, 0ms);
  EXPECT_EQ(p.scale_down_after, 8000ms);
  EXPECT_EQ(p.scale_down_below, 0.4);
  EXPECT_EQ(p.kv_high, 0.9);
  EXPECT_EQ(p.kv_low, 0.3);
  EXPECT_TRUE(p.batch_cap);
}

TEST(planner_config, rejects_bad_values_naming_file_line_table_and_key) {
  // Each case: the [planner] table after a one-process shape (lines 1-2) and its message.
  const std::pair<const char*, const char*> cases[] = {
      {"[planner]\nenabled = 1\n", "x.toml:4: [planner] enabled must be a boolean, got an integer"},
      {"[planner]\nttft_ms = 0\n", "x.toml:4: [planner] ttft_ms must be in [1, 3600000], got 0"},
      {"[planner]\ninterval_ms = 50\n",
       "x.toml:4: [planner] interval_ms must be in [100, 3600000], got 50"},
      {"[planner]\nmin_decode = 0\n", "x.toml:4: [planner] min_decode must be in [1, 1024], got 0"},
      {"[planner]\nscale_down_below = 1.0\n",
       "x.toml:4: [planner] scale_down_below must be in [0.05, 0.95], got 1"},
      {"[planner]\nkv_high = 0.0\n", "x.toml:4: [planner] kv_high must be in (0, 1], got 0"},
      {"[planner]\nintervl_ms = 5000\n",
       "x.toml:4: [planner] unknown key 'intervl_ms' (did you mean 'interval_ms'?)"},
      // Rules across keys name the key that breaks them.
      {"[planner]\nmin_prefill = 3\nmax_prefill = 2\n",
       "x.toml:5: [planner] max_prefill must be >= min_prefill (3), got 2"},
      {"[planner]\nmin_decode = 5\n",
       "x.toml:3: [planner] max_decode must be >= min_decode (5), got 4"},
      {"[planner]\nmin_prefill = 2\nmin_decode = 2\nmax_total = 3\n",
       "x.toml:6: [planner] max_total must be 0 or >= min_prefill + min_decode (4), got 3"},
      {"[planner]\nkv_low = 0.9\n", "x.toml:4: [planner] kv_low must be < kv_high (0.85), got 0.9"},
  };
  for (auto& [tables, message] : cases) EXPECT_EQ(error_of(tables), message) << tables;
}

TEST(planner_config, refuses_a_topology_it_cannot_plan_naming_the_key) {
  constexpr const char* on = "[planner]\nenabled = true\nmax_prefill = 2\nmax_decode = 2\n";
  const std::string p = "[process.prefill]\nroles = [\"prefill\"]\ncount = 2\n";
  const std::string d = "[process.decode]\nroles = [\"decode\"]\ncount = 2\n";
  const std::string gateway = "[process.gateway]\nroles = [\"gateway\", \"scheduler\"]\n";
  // Each case: a topology and the start of its message (the rest explains why).
  const std::pair<std::string, std::string> cases[] = {
      {gateway + d, "x.toml:7: [planner] enabled needs a [process.<kind>] with \"prefill\""},
      {gateway + "[process.both]\nroles = [\"prefill\", \"decode\"]\ncount = 2\n",
       "x.toml:4: [process.both] roles hosts both \"prefill\" and \"decode\""},
      {gateway + p + d + "per_process = 2\n",
       "x.toml:9: [process.decode] per_process must be 1 with the planner on"},
      {gateway + p +
           "[process.decode]\nroles = [\"decode\"]\ncount = 1\n"
           "[process.shard]\nroles = [\"expert_shard\"]\n",
       "x.toml:14: [planner] max_decode must be at most [process.decode] count (1)"},
  };
  for (auto& [topology, message] : cases) {
    const auto error = error_of(on, topology.c_str());
    EXPECT_EQ(error.substr(0, message.size()), message) << topology << "\n" << error;
  }
  const auto ep = error_of(std::string(on) + "[ep]\ndecode_ranks = 2\n", (gateway + p + d).c_str());
  EXPECT_TRUE(ep.starts_with("x.toml:14: [ep] decode_ranks must be 1 with the planner on"))
      << "expert-parallel groups are not scaled by counts: " << ep;
  EXPECT_EQ(error_of(on, (gateway + p + d).c_str()), "") << "a plannable shape loads";
  EXPECT_EQ(error_of("", (gateway + "[process.both]\nroles = [\"prefill\", \"decode\"]\n").c_str()),
            "")
      << "with the planner off, any shape loads";
}
