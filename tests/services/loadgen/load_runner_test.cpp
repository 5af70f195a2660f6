// The load generator against a fake OpenAI server on loopback: a closed loop at concurrency 4,
// misbehaving answers, a Poisson schedule, and a port nobody listens on.

#include "services/loadgen/http_client.hpp"
#include "services/loadgen/load_runner.hpp"
#include "services/loadgen/report.hpp"
#include "tests/services/loadgen/fake_openai_server.hpp"

// clang-format off
#include <utility> // before asio: Boost 1.74's awaitable.hpp uses std::exchange
// clang-format on
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace lg = supernode::services::loadgen;
using supernode::tests::loadgen::fake_openai_server;
using supernode::tests::loadgen::fake_reply;
using supernode::tests::loadgen::fake_server_options;

namespace {

lg::workload_spec small_workload(int64_t n) {
  lg::workload_spec spec;
  spec.num_prompts = n;
  spec.input = lg::parse_length_distribution("uniform:4:40");
  spec.output = lg::parse_length_distribution("uniform:1:12");
  spec.shared_prefix_ratio = 0.5;
  spec.seed = 7;
  return spec;
}

lg::run_options options_for(const std::string& url, int64_t concurrency, double timeout_s) {
  lg::run_options o;
  o.url = lg::parse_http_url(url);
  o.model = "fake-model";
  o.max_concurrency = concurrency;
  o.timeout_s = timeout_s;
  return o;
}

} // namespace

TEST(loadgen_runner, closed_loop_at_concurrency_4_with_one_overloaded_answer) {
  // The fake answers its 10th request with 429 and holds the first answers until 4 requests
  // are open, so the run only finishes if the client really keeps 4 in flight.
  fake_server_options fo;
  fo.reply_for = [](int64_t nth) {
    return nth == 10 ? fake_reply::overloaded : fake_reply::stream;
  };
  fo.first_wave = 4;
  fake_openai_server server(fo);

  const auto plan = lg::make_workload(small_workload(20));
  auto options = options_for(server.url(), 4, 20);
  std::vector<lg::run_progress> progress;
  options.on_progress = [&](const lg::run_progress& p) { progress.push_back(p); };
  const auto result = lg::run_load(plan, options);

  EXPECT_EQ(server.completions_received(), 20);
  EXPECT_EQ(server.bad_requests(), 0);
  EXPECT_EQ(server.max_open_streams(), 4);
  ASSERT_EQ(result.outcomes.size(), 20u);
  int failed = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& o = result.outcomes[i];
    EXPECT_EQ(o.prompt_tokens, static_cast<int64_t>(plan[i].prompt.size()));
    if (!o.ok) {
      ++failed;
      EXPECT_EQ(o.http_status, 429);
      EXPECT_EQ(o.error, "HTTP 429: server overloaded, retry later");
      continue;
    }
    // Every token event the fake sent was seen, however the fake cut its chunks.
    EXPECT_EQ(o.completion_tokens, plan[i].max_tokens) << "request " << i;
    EXPECT_EQ(static_cast<int64_t>(o.token_times_s.size()), plan[i].max_tokens);
    EXPECT_LE(o.send_s, o.token_times_s.front());
    EXPECT_LE(o.token_times_s.back(), o.end_s);
  }
  EXPECT_EQ(failed, 1);
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().done, 20);
  EXPECT_EQ(progress.back().failed, 1);
  EXPECT_EQ(progress.back().in_flight, 0);

  const auto report = lg::make_report(result.outcomes, result.duration_s, {1e6, 1e6, {}});
  EXPECT_EQ(report.completed, 19);
  EXPECT_EQ(report.failed, 1);
  EXPECT_EQ(report.good_requests, 19);
  EXPECT_GT(report.duration_s, 0);
  const auto j = lg::to_json(report);
  EXPECT_EQ(j["failures"][0]["reason"], "HTTP 429: server overloaded, retry later");
  EXPECT_EQ(j["failures"][0]["count"], 1);
  int64_t sent_tokens = 0;
  for (size_t i = 0; i < plan.size(); ++i)
    if (result.outcomes[i].ok) sent_tokens += plan[i].max_tokens;
  EXPECT_EQ(j["total_output_tokens"], sent_tokens);
  for (const char* key : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    EXPECT_TRUE(j[key]["p99"].is_number()) << key;
    EXPECT_GE(j[key]["min"].get<double>(), 0) << key;
  }
  EXPECT_GT(j["request_throughput"].get<double>(), 0);
}

TEST(loadgen_runner, broken_streams_and_timeouts_fail_with_their_reason) {
  fake_server_options fo;
  fo.reply_for = [](int64_t nth) {
    switch (nth) {
    case 2:
      return fake_reply::truncated;
    case 3:
      return fake_reply::malformed;
    case 4:
      return fake_reply::silent;
    default:
      return fake_reply::stream;
    }
  };
  fake_openai_server server(fo);
  auto spec = small_workload(6);
  spec.output = lg::parse_length_distribution("8");
  const auto plan = lg::make_workload(spec);
  // Concurrency 1 so the fake's nth request is the plan's nth.
  const auto result = lg::run_load(plan, options_for(server.url(), 1, 0.5));

  ASSERT_EQ(result.outcomes.size(), 6u);
  EXPECT_TRUE(result.outcomes[0].ok);
  EXPECT_EQ(result.outcomes[1].error, "reading stream: partial message");
  EXPECT_EQ(result.outcomes[2].error.rfind("malformed stream event: {oops", 0), 0u)
      << result.outcomes[2].error;
  EXPECT_EQ(result.outcomes[3].error, "response header: timed out after 0.5 s");
  EXPECT_TRUE(result.outcomes[4].ok);
  EXPECT_TRUE(result.outcomes[5].ok);
  // The truncated stream still recorded the tokens that did arrive.
  EXPECT_EQ(result.outcomes[1].token_times_s.size(), 4u);
}

TEST(loadgen_runner, poisson_schedule_is_kept) {
  fake_openai_server server({});
  auto spec = small_workload(12);
  spec.request_rate = 200;
  const auto plan = lg::make_workload(spec);
  const auto result = lg::run_load(plan, options_for(server.url(), 0, 20));
  for (size_t i = 0; i < plan.size(); ++i) {
    EXPECT_TRUE(result.outcomes[i].ok) << result.outcomes[i].error;
    // Never early; a loaded machine may be late.
    EXPECT_GE(result.outcomes[i].send_s, plan[i].arrival_s - 1e-6);
  }
  EXPECT_GE(result.duration_s, plan.back().arrival_s);
}

TEST(loadgen_runner, nothing_listening_fails_every_request_without_crashing) {
  // Bind an ephemeral port and close it again: connecting there is refused.
  uint16_t port = 0;
  {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }
  const auto plan = lg::make_workload(small_workload(8));
  const auto result =
      lg::run_load(plan, options_for("http://127.0.0.1:" + std::to_string(port), 3, 5));
  ASSERT_EQ(result.outcomes.size(), 8u);
  for (const auto& o : result.outcomes) {
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.error, "connect: Connection refused");
  }
  const auto report = lg::make_report(result.outcomes, result.duration_s, {});
  EXPECT_EQ(report.completed, 0);
  EXPECT_EQ(report.failed, 8);
  ASSERT_EQ(report.failures.size(), 1u);
  EXPECT_EQ(report.failures[0].count, 8);
  EXPECT_TRUE(lg::to_json(report)["ttft_ms"]["p50"].is_null());
}

TEST(loadgen_runner, unresolvable_host_fails_every_request) {
  const auto plan = lg::make_workload(small_workload(3));
  const auto result = lg::run_load(plan, options_for("http://no-such-host.invalid:1", 2, 5));
  for (const auto& o : result.outcomes) {
    EXPECT_FALSE(o.ok);
    EXPECT_EQ(o.error.rfind("resolve no-such-host.invalid: ", 0), 0u) << o.error;
  }
}

TEST(loadgen_runner, model_id_comes_from_v1_models) {
  fake_server_options fo;
  fo.model_id = "deepseek-v3-fake";
  fake_openai_server server(fo);
  const auto m = lg::fetch_served_model(lg::parse_http_url(server.url()), 5);
  EXPECT_EQ(m.id, "deepseek-v3-fake");
  EXPECT_EQ(m.max_model_len, 4096);
  EXPECT_EQ(server.completions_received(), 0);
}

TEST(loadgen_runner, a_refused_connection_is_retried_on_the_next_url) {
  uint16_t closed = 0;
  {
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor a(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    closed = a.local_endpoint().port();
  }
  fake_server_options fo;
  fo.reply_for = [](int64_t nth) { return nth == 3 ? fake_reply::overloaded : fake_reply::stream; };
  fake_openai_server server(fo);
  const auto plan = lg::make_workload(small_workload(6));
  auto options = options_for("http://127.0.0.1:" + std::to_string(closed), 2, 20);
  options.more_urls.push_back(lg::parse_http_url(server.url()));
  options.retries = 1;
  const auto result = lg::run_load(plan, options);
  EXPECT_EQ(server.completions_received(), 6); // each request once, after one refusal
  int overloaded = 0;
  for (const auto& o : result.outcomes) {
    EXPECT_EQ(o.retries, 1);
    EXPECT_FALSE(o.connection_error && o.ok);
    if (o.http_status == 429) {
      ++overloaded; // the retry went to the fake, which answered 429: that is the outcome
      EXPECT_FALSE(o.connection_error);
      continue;
    }
    EXPECT_TRUE(o.ok) << o.error;
    EXPECT_LE(o.send_s, o.token_times_s.front()); // the first attempt's send time
  }
  EXPECT_EQ(overloaded, 1);

  // With no retry left after the refusal, the refusal is the outcome.
  options.retries = 0;
  const auto no_retry = lg::run_load(plan, options);
  for (const auto& o : no_retry.outcomes) {
    EXPECT_FALSE(o.ok);
    EXPECT_TRUE(o.connection_error);
    EXPECT_EQ(o.error, "connect: Connection refused");
  }
}

TEST(loadgen_runner, an_http_error_is_not_resubmitted) {
  fake_server_options fo;
  fo.reply_for = [](int64_t) { return fake_reply::overloaded; };
  fake_openai_server server(fo);
  const auto plan = lg::make_workload(small_workload(3));
  auto options = options_for(server.url(), 1, 20);
  options.retries = 5;
  const auto result = lg::run_load(plan, options);
  EXPECT_EQ(server.completions_received(), 3);
  for (const auto& o : result.outcomes) {
    EXPECT_EQ(o.http_status, 429);
    EXPECT_EQ(o.retries, 0);
  }
}
