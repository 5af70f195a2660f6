// /health from the gateway's view: 503 with the reason while nothing can serve, 200 "degraded"
// naming what is missing while part of the cluster is down or re-forming, 200 "ok" otherwise.

#include "services/gateway/cluster_metrics.hpp"
#include "services/gateway/health.hpp"

#include <gtest/gtest.h>

using namespace supernode::services;
using namespace supernode::services::gateway;

namespace {

std::vector<member_health> pdc() {
  return {{"scheduler-0", "scheduler", true, {}}, {"prefill-0", "prefill", true, {}},
          {"prefill-1", "prefill", true, {}},     {"decode-0", "decode", true, {}},
          {"decode-1", "decode", true, {}},       {"mp_controller-0", "mp_controller", true, {}}};
}

member_health& named(std::vector<member_health>& ms, const std::string& name) {
  for (auto& m : ms)
    if (m.name == name) return m;
  throw std::runtime_error("no " + name);
}

bool mentions(const health_report& h, const std::string& what) {
  for (auto& p : h.problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

} // namespace

TEST(health, all_alive_is_ok) {
  const auto h = assess_health(pdc());
  EXPECT_EQ(h.status, 200u);
  EXPECT_EQ(h.state, "ok");
  EXPECT_EQ(h.json(), R"({"status":"ok"})");
}

TEST(health, a_missing_instance_is_degraded_and_named) {
  auto ms = pdc();
  named(ms, "decode-1").alive = false;
  named(ms, "mp_controller-0").alive = false;
  const auto h = assess_health(ms);
  EXPECT_EQ(h.status, 200u);
  EXPECT_EQ(h.state, "degraded");
  EXPECT_TRUE(mentions(h, "decode-1 (decode) is down"));
  EXPECT_TRUE(mentions(h, "mp_controller-0 (mp_controller) is down"));
}

TEST(health, a_broken_group_everywhere_is_unavailable_with_its_reason) {
  auto ms = pdc();
  for (auto name : {"decode-0", "decode-1"})
    named(ms, name).unavailable = {protocol::ep_errc::group_broken,
                                   "expert-parallel group broken: rank 2 is down"};
  const auto h = assess_health(ms);
  EXPECT_EQ(h.status, 503u);
  EXPECT_EQ(h.state, "unavailable");
  EXPECT_EQ(h.problems.front(), "no decode instance is serving");
  EXPECT_TRUE(mentions(h, "rank 2 is down"));
}

TEST(health, no_prefill_or_no_scheduler_is_unavailable) {
  auto ms = pdc();
  named(ms, "prefill-0").alive = named(ms, "prefill-1").alive = false;
  EXPECT_TRUE(mentions(assess_health(ms), "no prefill instance is serving"));
  EXPECT_EQ(assess_health(ms).status, 503u);
  ms = pdc();
  named(ms, "scheduler-0").alive = false;
  EXPECT_TRUE(mentions(assess_health(ms), "no scheduler is alive"));
  // A colocated cluster has no prefill instance at all, and needs none.
  std::vector<member_health> colocated{{"scheduler-0", "scheduler", true, {}},
                                       {"decode-0", "decode", true, {}}};
  EXPECT_EQ(assess_health(colocated).state, "ok");
}

TEST(cluster_metrics, instances_are_counted_per_role_and_state_zeros_included) {
  auto ms = pdc();
  named(ms, "decode-1").alive = false;
  named(ms, "prefill-0").unavailable = {protocol::ep_errc::group_broken, "re-forming"};
  cluster_snapshot snap;
  snap.members = ms;
  metrics_registry metrics;
  render_cluster_metrics(metrics, snap);
  const auto text = metrics.render();
  for (const char* line : {"supernode_instances{role=\"decode\",state=\"serving\"} 1",
                           "supernode_instances{role=\"decode\",state=\"down\"} 1",
                           "supernode_instances{role=\"decode\",state=\"unavailable\"} 0",
                           "supernode_instances{role=\"prefill\",state=\"serving\"} 1",
                           "supernode_instances{role=\"prefill\",state=\"unavailable\"} 1",
                           "supernode_instances{role=\"mp_controller\",state=\"serving\"} 1",
                           "supernode_instances{role=\"scheduler\",state=\"down\"} 0"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " missing from\n" << text;
}
