#pragma once
// What the fault tests share: pid files of the supervised processes, a mixed workload (greedy
// and seeded sampling, streamed and not), firing a fault at a moment /metrics shows and checking
// every answer against the reference engine, and a request served after the fault.

#include "../support/eventually.hpp"
#include "serving_fixture.hpp"

#include <csignal>
#include <fstream>
#include <gtest/gtest.h>
#include <thread>

namespace supernode::testing {

inline pid_t pid_of(const serving_cluster& cluster, const std::string& process) {
  pid_t pid = 0;
  std::ifstream(cluster.run_dir() / "pids" / (process + ".pid")) >> pid;
  return pid;
}

inline std::vector<served_prompt> workload(size_t n, int64_t prompt_tokens, int32_t max_tokens) {
  std::vector<served_prompt> out;
  for (size_t i = 0; i < n; ++i) {
    served_prompt p{test_prompt(prompt_tokens, 700 + static_cast<int64_t>(i)), max_tokens};
    if (i % 2 == 1) { // every other one sampled, with its own seed
      p.temperature = 0.8f;
      p.seed = 40 + i;
    }
    out.push_back(std::move(p));
  }
  return out;
}

// Sends every prompt at once (odd ones streamed), fires `fault` once `ready(metrics)` holds,
// and checks every answer against the reference.
// With `expect_resumed`, the fault must have hit requests in flight (the gateway placed some
// again); a fault the instances absorb themselves (a group re-forming) resumes none.
template<class Ready, class Fault>
void expect_no_request_lost(serving_cluster& cluster, const std::vector<served_prompt>& prompts,
                            Ready ready, Fault fault, bool expect_resumed = true) {
  for (auto& p : prompts) (void)reference_tokens(p); // computed before the clock runs
  std::vector<http_reply> replies(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i)
    clients.emplace_back([&, i] {
      replies[i] = http_call(cluster.port(), "POST", "/v1/completions",
                             completion_body(prompts[i], i % 2 == 1), std::chrono::seconds(120));
    });
  const auto [text, hit] = poll_metrics(cluster.port(), ready, std::chrono::seconds(60));
  if (hit) fault();
  for (auto& t : clients) t.join();
  ASSERT_TRUE(hit) << "the fault's moment never came; metrics:\n" << text;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(replies[i].error.empty()) << i << ": " << replies[i].error;
    ASSERT_EQ(replies[i].status, 200u) << i << ": " << replies[i].body << "\nlogs:\n"
                                       << log_digest(cluster.run_dir());
    const auto got = answered_tokens(replies[i]);
    ASSERT_TRUE(got) << replies[i].body;
    EXPECT_EQ(*got, reference_tokens(prompts[i])) << "request " << i;
  }
  if (!expect_resumed) return;
  const auto after = http_call(cluster.port(), "GET", "/metrics").body;
  EXPECT_GT(metric_sum(after, "supernode_requests_resumed_total"), 0.0)
      << "the fault hit no request in flight:\n"
      << after;
}

// After the fault: a new request is served, with the reference tokens.
inline void expect_serves_the_reference(const serving_cluster& cluster) {
  const served_prompt later{test_prompt(30, 9), 12};
  const auto reply = http_call(cluster.port(), "POST", "/v1/completions", completion_body(later),
                               std::chrono::seconds(60));
  ASSERT_EQ(reply.status, 200u) << reply.body;
  EXPECT_EQ(answered_tokens(reply), reference_tokens(later));
}

inline double running_on(const std::string& metrics, const std::string& instance) {
  return metric(metrics, "supernode_instance_running", {{"instance", instance}}).value_or(0.0);
}

} // namespace supernode::testing
