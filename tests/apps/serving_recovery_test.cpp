// Faults under load that lose no request: a process of a PDC cluster is killed (SIGKILL) or
// hung (SIGSTOP past the liveness bound) while requests stream through it, and every request
// still answers 200 with the reference engine's tokens — greedy and seeded sampling, streamed
// and not — because the gateway places the requests it held again and they resume where
// their streams stopped. The resumed counter proves the fault hit requests in flight.

#include "../support/eventually.hpp"
#include "serving_fixture.hpp"

#include <csignal>
#include <fstream>
#include <gtest/gtest.h>
#include <thread>

using namespace supernode::testing;

namespace {

pid_t pid_of(const serving_cluster& cluster, const std::string& process) {
  pid_t pid = 0;
  std::ifstream(cluster.run_dir() / "pids" / (process + ".pid")) >> pid;
  return pid;
}

std::vector<served_prompt> workload(size_t n, int64_t prompt_tokens, int32_t max_tokens) {
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
                                       << read_logs(cluster.run_dir());
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
void expect_serves_the_reference(const serving_cluster& cluster) {
  const served_prompt later{test_prompt(30, 9), 12};
  const auto reply = http_call(cluster.port(), "POST", "/v1/completions", completion_body(later),
                               std::chrono::seconds(60));
  ASSERT_EQ(reply.status, 200u) << reply.body;
  EXPECT_EQ(answered_tokens(reply), reference_tokens(later));
}

double running_on(const std::string& metrics, const std::string& instance) {
  return metric(metrics, "supernode_instance_running", {{"instance", instance}}).value_or(0.0);
}

} // namespace

TEST(serving_recovery, a_decode_process_killed_mid_generation_loses_no_request) {
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  const auto prompts = workload(8, 40, 120);
  expect_no_request_lost(
      cluster, prompts, [](const std::string& m) { return running_on(m, "decode-1") >= 2; },
      [&] { ASSERT_EQ(::kill(pid_of(cluster, "decode-1"), SIGKILL), 0); });
}

TEST(serving_recovery, a_decode_killed_with_its_kv_mirrored_resumes_from_the_pool) {
  // [ems] store_decode_kv = "incremental": decode-1 mirrors each full KV block into the pool, and
  // the instance a request resumes on loads its generated span from there instead of
  // recomputing it, with the same tokens.
  serving_cluster cluster(
      "pdc-ems.toml", tiny_model_dir(),
      {{"ems", "block_tokens", "16"}, {"ems", "store_decode_kv", "\"incremental\""}});
  ASSERT_TRUE(cluster.up());
  const auto prompts = workload(8, 40, 160);
  auto decode_hits = [](const std::string& m) {
    double hits = 0;
    for (const char* d : {"decode-0", "decode-1"})
      hits += metric(m, "supernode_cache_hit_tokens", {{"instance", d}}).value_or(0.0);
    return hits;
  };
  expect_no_request_lost(
      cluster, prompts,
      [](const std::string& m) {
        return running_on(m, "decode-1") >= 2 &&
               metric(m, "supernode_cache_stored_blocks", {{"instance", "decode-1"}})
                       .value_or(0.0) >= 4;
      },
      [&] { ASSERT_EQ(::kill(pid_of(cluster, "decode-1"), SIGKILL), 0); });
  const auto [text, loaded] =
      poll_metrics(cluster.port(), [&](const std::string& m) { return decode_hits(m) > 0; });
  EXPECT_TRUE(loaded) << "no resumed request loaded mirrored KV:\n" << text;
}

TEST(serving_recovery, a_prefill_process_killed_with_prompts_queued_loses_no_request) {
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir(), {{{"prefill", "token_budget", "64"}}});
  ASSERT_TRUE(cluster.up());
  // Long prompts and a small budget: each prefill instance has a queue when the kill lands.
  const auto prompts = workload(12, 200, 8);
  expect_no_request_lost(
      cluster, prompts,
      [](const std::string& m) {
        return metric(m, "supernode_prefill_outstanding_tokens", {{"instance", "prefill-1"}})
                   .value_or(0.0) >= 400;
      },
      [&] { ASSERT_EQ(::kill(pid_of(cluster, "prefill-1"), SIGKILL), 0); });
}

TEST(serving_recovery, a_decode_process_hung_past_the_liveness_bound_loses_no_request) {
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  const auto prompts = workload(8, 40, 120);
  const pid_t hung = pid_of(cluster, "decode-1");
  expect_no_request_lost(
      cluster, prompts, [](const std::string& m) { return running_on(m, "decode-1") >= 2; },
      [&] { ASSERT_EQ(::kill(hung, SIGSTOP), 0); });
  // It wakes after its requests finished elsewhere: its peers refuse its incarnation and tell
  // it so, and it stops itself (to come back as a new incarnation); nothing it still sent
  // reached a client (every answer above is already checked), and the cluster keeps serving.
  ASSERT_EQ(::kill(hung, SIGCONT), 0);
  EXPECT_TRUE(eventually([&] { return ::kill(hung, 0) != 0; }))
      << "the fenced process did not stop; logs:\n"
      << read_logs(cluster.run_dir());
  EXPECT_NE(read_logs(cluster.run_dir()).find("fenced by"), std::string::npos);
  expect_serves_the_reference(cluster);
}

TEST(serving_recovery, a_decode_process_of_1p1d_killed_is_restarted_and_loses_no_request) {
  // The only decode instance: its requests wait at the gateway until the supervisor has it
  // back (a new incarnation), then resume there.
  serving_cluster cluster("pdc-1p1d.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  const auto before = pid_of(cluster, "decode-0");
  expect_no_request_lost(
      cluster, workload(6, 40, 120),
      [](const std::string& m) { return running_on(m, "decode-0") >= 2; },
      [&] { ASSERT_EQ(::kill(before, SIGKILL), 0); });
  EXPECT_NE(pid_of(cluster, "decode-0"), before) << "the supervisor did not restart it";
}

TEST(serving_recovery,
     an_expert_parallel_rank_killed_mid_step_loses_no_request_and_the_group_grows_back) {
  // lep-ep4: decode-0..3 are one decode instance of four ranks. The survivors re-form over
  // three and keep their sequences; decode-2's resume on them; the restarted rank rejoins and
  // the group is four again.
  serving_cluster cluster("lep-ep4.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  expect_no_request_lost(
      cluster, workload(8, 20, 200),
      [](const std::string& m) {
        double all = 0;
        for (int r = 0; r < 4; ++r) all += running_on(m, "decode-" + std::to_string(r));
        return running_on(m, "decode-2") >= 1 && all >= 4;
      },
      [&] { ASSERT_EQ(::kill(pid_of(cluster, "decode-2"), SIGKILL), 0); });
  const auto logs = read_logs(cluster.run_dir());
  EXPECT_NE(logs.find("re-formed over 3 of 4 ranks"), std::string::npos) << logs;
  EXPECT_TRUE(eventually([&] {
    return read_logs(cluster.run_dir()).find("re-formed over 4 of 4 ranks") != std::string::npos;
  })) << read_logs(cluster.run_dir());
  const auto [health, ok] = poll_metrics(cluster.port(), [&](const std::string&) {
    return http_call(cluster.port(), "GET", "/health").status == 200;
  });
  EXPECT_TRUE(ok);
  expect_serves_the_reference(cluster);
}

TEST(serving_recovery, an_expert_shard_killed_mid_step_loses_no_request) {
  // split-attn-moe: two attention ranks, the experts on four shard processes only. The others
  // take the dead shard's experts over (a new placement), the attention ranks keep their
  // sequences, and the restarted shard is taken back in.
  serving_cluster cluster("split-attn-moe.toml", tiny_model_dir());
  ASSERT_TRUE(cluster.up());
  expect_no_request_lost(
      cluster, workload(6, 20, 200),
      [](const std::string& m) {
        return running_on(m, "decode-0") + running_on(m, "decode-1") >= 4;
      },
      [&] { ASSERT_EQ(::kill(pid_of(cluster, "experts-1"), SIGKILL), 0); },
      /*expect_resumed=*/false);
  EXPECT_NE(read_logs(cluster.run_dir()).find("re-formed over 5 of 6 ranks"), std::string::npos)
      << read_logs(cluster.run_dir());
  EXPECT_TRUE(eventually([&] {
    return read_logs(cluster.run_dir()).find("re-formed over 6 of 6 ranks") != std::string::npos;
  })) << read_logs(cluster.run_dir());
}
