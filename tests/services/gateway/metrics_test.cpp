#include "services/gateway/metrics.hpp"

#include <gtest/gtest.h>
#include <thread>

using namespace supernode::services::gateway;

TEST(metrics_registry, empty_renders_nothing) {
  metrics_registry m;
  EXPECT_EQ(m.render(), "");
}

TEST(metrics_registry, counter_and_gauge_with_sorted_labels) {
  metrics_registry m;
  m.add_counter("supernode_requests_total", "Requests by outcome.", 1,
                {{"status", "200"}, {"endpoint", "/v1/completions"}});
  m.add_counter("supernode_requests_total", "Requests by outcome.", 2,
                {{"endpoint", "/v1/completions"}, {"status", "200"}});
  m.add_counter("supernode_requests_total", "Requests by outcome.", 1,
                {{"endpoint", "/v1/chat/completions"}, {"status", "400"}});
  m.set_gauge("supernode_running_requests", "Requests being generated.", 5);
  m.set_gauge("supernode_running_requests", "Requests being generated.", 3);
  m.set_gauge("supernode_kv_usage", "Fraction of KV blocks in use.", 0.25);
  EXPECT_EQ(m.render(),
            "# HELP supernode_kv_usage Fraction of KV blocks in use.\n"
            "# TYPE supernode_kv_usage gauge\n"
            "supernode_kv_usage 0.25\n"
            "# HELP supernode_requests_total Requests by outcome.\n"
            "# TYPE supernode_requests_total counter\n"
            "supernode_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} 1\n"
            "supernode_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 3\n"
            "# HELP supernode_running_requests Requests being generated.\n"
            "# TYPE supernode_running_requests gauge\n"
            "supernode_running_requests 3\n");
}

TEST(metrics_registry, histogram_buckets_are_cumulative_with_inf_sum_and_count) {
  metrics_registry m;
  const double bounds[] = {0.125, 0.5, 1};
  const labels l = {{"model", "demo"}};
  for (double v : {0.0625, 0.125, 0.25, 2.0})
    m.observe("ttft_seconds", "Time to first token.", bounds, v, l);
  EXPECT_EQ(m.render(), "# HELP ttft_seconds Time to first token.\n"
                        "# TYPE ttft_seconds histogram\n"
                        "ttft_seconds_bucket{model=\"demo\",le=\"0.125\"} 2\n"
                        "ttft_seconds_bucket{model=\"demo\",le=\"0.5\"} 3\n"
                        "ttft_seconds_bucket{model=\"demo\",le=\"1\"} 3\n"
                        "ttft_seconds_bucket{model=\"demo\",le=\"+Inf\"} 4\n"
                        "ttft_seconds_sum{model=\"demo\"} 2.4375\n"
                        "ttft_seconds_count{model=\"demo\"} 4\n");
}

TEST(metrics_registry, histogram_without_labels_and_latency_buckets) {
  metrics_registry m;
  m.observe("tpot_seconds", "Time per output token.", latency_buckets_seconds, 0.003);
  const std::string out = m.render();
  EXPECT_NE(out.find("tpot_seconds_bucket{le=\"0.001\"} 0\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tpot_seconds_bucket{le=\"0.005\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tpot_seconds_bucket{le=\"60\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tpot_seconds_bucket{le=\"+Inf\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tpot_seconds_sum 0.003\n"), std::string::npos) << out;
  EXPECT_NE(out.find("tpot_seconds_count 1\n"), std::string::npos) << out;
  for (size_t i = 1; i < std::size(latency_buckets_seconds); ++i)
    EXPECT_LT(latency_buckets_seconds[i - 1], latency_buckets_seconds[i]);
}

TEST(metrics_registry, label_values_and_help_are_escaped) {
  metrics_registry m;
  m.add_counter("errors_total", "Errors, with \\ and\nnewline.", 1,
                {{"message", "say \"hi\"\\\nbye"}});
  EXPECT_EQ(m.render(), "# HELP errors_total Errors, with \\\\ and\\nnewline.\n"
                        "# TYPE errors_total counter\n"
                        "errors_total{message=\"say \\\"hi\\\"\\\\\\nbye\"} 1\n");
}

TEST(metrics_registry, misuse_is_rejected) {
  metrics_registry m;
  m.add_counter("c_total", "c", 1);
  EXPECT_THROW(m.set_gauge("c_total", "c", 1), std::invalid_argument);
  EXPECT_THROW(m.add_counter("c_total", "c", -1), std::invalid_argument);
  EXPECT_THROW(m.add_counter("bad name", "c", 1), std::invalid_argument);
  EXPECT_THROW(m.add_counter("c_total", "c", 1, {{"9x", "v"}}), std::invalid_argument);
  EXPECT_THROW(m.add_counter("c_total", "c", 1, {{"a", "1"}, {"a", "2"}}), std::invalid_argument);
  const double bounds[] = {1, 2};
  const double other[] = {1, 3};
  const double unsorted[] = {2, 1};
  m.observe("h", "h", bounds, 1);
  EXPECT_THROW(m.observe("h", "h", other, 1), std::invalid_argument);
  EXPECT_THROW(m.observe("h2", "h", unsorted, 1), std::invalid_argument);
  EXPECT_THROW(m.observe("h", "h", bounds, 1, {{"le", "1"}}), std::invalid_argument);
  EXPECT_THROW(m.observe("h", "h", other, 1, {{"new", "series"}}), std::invalid_argument);
  // Rejected calls left nothing behind: one counter sample, one histogram series.
  const std::string out = m.render();
  EXPECT_EQ(out.find("new=\"series\""), std::string::npos) << out;
  EXPECT_NE(out.find("c_total 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("h_count 1\n"), std::string::npos) << out;
}

TEST(metrics_registry, concurrent_updates_are_all_counted) {
  metrics_registry m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        m.add_counter("n_total", "n", 1);
        m.observe("h", "h", latency_buckets_seconds, 0.01);
        if (i % 100 == 0) (void)m.render();
      }
    });
  for (auto& t : threads) t.join();
  const std::string out = m.render();
  EXPECT_NE(out.find("n_total 4000\n"), std::string::npos) << out;
  EXPECT_NE(out.find("h_count 4000\n"), std::string::npos) << out;
}
