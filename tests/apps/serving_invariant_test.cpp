// The invariant through the HTTP API: greedy tokens of every request equal the reference
// engine's, whatever the deployment shape (one process over inproc planes, prefill and decode
// in separate processes with the KV shipped over the RDMA plane, two of each) and whatever the
// batch a request shares (one at a time, or 32 at once). Every zmq plane runs CurveZMQ, over ipc
// in the configs and over tcp in the last test.

#include "../support/eventually.hpp"
#include "serving_fixture.hpp"
#include "transport/free_ports.hpp"

#include <gtest/gtest.h>
#include <thread>
#include <tuple>

using namespace supernode::testing;

namespace {

std::vector<served_prompt> prompts(size_t n, int64_t salt) {
  std::vector<served_prompt> out;
  for (size_t i = 0; i < n; ++i)
    out.push_back(
        {test_prompt(1 + static_cast<int64_t>((i * 37) % 90), salt + static_cast<int64_t>(i)),
         static_cast<int32_t>(2 + i % 7)});
  return out;
}

// A config of configs/, and the MTP drafts its decode instances make ([decode] mtp; 0: none).
class serving_invariant : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

void expect_reference_tokens_one_at_a_time_and_32_at_once(serving_cluster& cluster) {
  // One at a time, non-streamed and streamed.
  const auto alone = prompts(6, 1000);
  for (size_t i = 0; i < alone.size(); ++i) {
    const auto want = reference_tokens(alone[i]);
    auto r = http_call(cluster.port(), "POST", "/v1/completions", completion_body(alone[i], i % 2));
    auto got = answered_tokens(r);
    ASSERT_TRUE(got) << r.status << " " << r.body << r.error;
    EXPECT_EQ(*got, want) << "prompt " << i << (i % 2 ? " (streamed)" : "");
  }

  // 32 at once: every batch composition the server happens to form.
  const auto many = prompts(32, 2000);
  std::vector<http_reply> replies(many.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < many.size(); ++i)
    clients.emplace_back([&, i] {
      replies[i] = http_call(cluster.port(), "POST", "/v1/completions",
                             completion_body(many[i], i % 3 == 0));
    });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < many.size(); ++i) {
    auto got = answered_tokens(replies[i]);
    ASSERT_TRUE(got) << replies[i].status << " " << replies[i].body << replies[i].error;
    EXPECT_EQ(*got, reference_tokens(many[i])) << "prompt " << i;
  }
}

} // namespace

TEST_P(serving_invariant, greedy_tokens_equal_the_reference_one_at_a_time_and_32_at_once) {
  const auto& [config, mtp] = GetParam();
  std::vector<std::array<std::string, 3>> edits;
  if (mtp > 0) edits.push_back({"decode", "mtp", std::to_string(mtp)});
  serving_cluster cluster(config, tiny_model_dir(), edits);
  ASSERT_TRUE(cluster.up()) << config << " did not start";
  expect_reference_tokens_one_at_a_time_and_32_at_once(cluster);
  if (mtp == 0) return;
  // The decode instances did draft (and report it), so the tokens above went through verify
  // and rollback.
  double drafted = 0;
  EXPECT_TRUE(supernode::testing::eventually([&] {
    drafted = metric_sum(http_call(cluster.port(), "GET", "/metrics").body,
                         "supernode_mtp_drafted_tokens");
    return drafted > 0;
  })) << "no MTP drafts reported on /metrics";
}

TEST(serving_invariant_tcp, greedy_tokens_equal_the_reference_with_both_zmq_planes_over_tcp) {
  // pdc-1p1d's four instances take 3 ports each per plane: 12 for the VPC plane, 12 for RDMA.
  const int base = supernode::transport::free_tcp_port_range(24, 17);
  serving_cluster cluster("pdc-1p1d.toml", tiny_model_dir(), zmq_planes_over_tcp(base, 12));
  ASSERT_TRUE(cluster.up()) << "pdc-1p1d over tcp did not start";
  expect_reference_tokens_one_at_a_time_and_32_at_once(cluster);
}

// Every shape without drafts and with two (the tiny model's random MTP module: nearly every
// draft is rejected and rolled back, in every shape).
INSTANTIATE_TEST_SUITE_P(
    configs, serving_invariant,
    ::testing::Combine(::testing::Values("local.toml", "pdc-1p1d.toml", "pdc-2p2d.toml",
                                         "pdc-ems.toml", "lep-ep4.toml", "lep-ep8-threads.toml",
                                         "split-attn-moe.toml"),
                       ::testing::Values(0, 2)),
    [](const auto& info) {
      const auto& config = std::get<0>(info.param);
      auto name = config.substr(0, config.find('.'));
      std::replace(name.begin(), name.end(), '-', '_');
      const int mtp = std::get<1>(info.param);
      return mtp > 0 ? name + "_mtp" + std::to_string(mtp) : name;
    });
