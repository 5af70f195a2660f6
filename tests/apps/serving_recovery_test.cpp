// Faults under load that lose no request: a process of a PDC cluster is killed (SIGKILL) or
// hung (SIGSTOP past the liveness bound) while requests stream through it, and every request
// still answers 200 with the reference engine's tokens — greedy and seeded sampling, streamed
// and not — because the gateway places the requests it held again and they resume where
// their streams stopped. The resumed counter proves the fault hit requests in flight.

#include "serving_faults.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

using namespace supernode::testing;

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
  // The supervisor's liveness probe off for decode: this test is about what the woken process
  // does (serving_fault_matrix has hangs the probe ends).
  // A bound of at least 5 s, past a ZeroMQ connection's own 3 s: the peers must fence the hung
  // process while its connection still looks up (a drop first leaves it down but unfenced).
  const auto missed = std::to_string(std::max(50, std::atoi(test_missed_heartbeats)));
  serving_cluster cluster(
      "pdc-2p2d.toml", tiny_model_dir(),
      {{"process.decode", "liveness_timeout_ms", "0"}, {"cluster", "missed_heartbeats", missed}});
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
      << log_digest(cluster.run_dir());
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
  EXPECT_NE(logs.find("re-formed over 3 of 4 ranks"), std::string::npos)
      << log_digest(cluster.run_dir());
  EXPECT_TRUE(logs_eventually_contain(cluster.run_dir(), "re-formed over 4 of 4 ranks"))
      << log_digest(cluster.run_dir());
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
      << log_digest(cluster.run_dir());
  EXPECT_TRUE(logs_eventually_contain(cluster.run_dir(), "re-formed over 6 of 6 ranks"))
      << log_digest(cluster.run_dir());
}

TEST(serving_recovery, a_decode_killed_while_drafting_with_mtp_loses_no_request) {
  // [decode] mtp = 2: the requests resume on the other decode instance from their prefill's MTP
  // state and keep drafting, with the reference engine's greedy tokens. Greedy only: with the
  // standard speculative-sampling rule a sampled request keeps its distribution, not its draws.
  serving_cluster cluster("pdc-2p2d.toml", tiny_model_dir(), {{"decode", "mtp", "2"}});
  ASSERT_TRUE(cluster.up());
  auto prompts = workload(8, 40, 120);
  for (auto& p : prompts) p.temperature = 0.0f;
  expect_no_request_lost(
      cluster, prompts, [](const std::string& m) { return running_on(m, "decode-1") >= 2; },
      [&] { ASSERT_EQ(::kill(pid_of(cluster, "decode-1"), SIGKILL), 0); });
  const auto [text, drafted] = poll_metrics(cluster.port(), [](const std::string& m) {
    return metric_sum(m, "supernode_mtp_drafted_tokens") > 0;
  });
  EXPECT_TRUE(drafted) << text;
}
