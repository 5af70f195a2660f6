// Every process kind of pdc-ems, lep-ep4 and split-attn-moe (and the scheduler of pdc-ha, its
// own process there) killed (SIGKILL) or hung (SIGSTOP past the liveness bound) under a mixed
// load: every request answers 200 with the reference engine's tokens, greedy and seeded, streamed
// and not. A hung process is fenced by its peers and, once its work moved, killed by the
// supervisor's liveness probe (or, woken first, stops itself); either way it comes back as a new
// incarnation and the cluster serves again. The gateway of these configs hosts the scheduler
// and has no twin: its death ends its clients' connections, which chaos_test covers on pdc-ha
// with a retrying client.

#include "serving_faults.hpp"

#include <ostream>

using namespace supernode::testing;

namespace {

struct fault_case {
  const char* config;
  const char* process;  // the slot: "ems-1"
  const char* instance; // its instance: "mp_server-1"
  int signal;           // SIGKILL or SIGSTOP
  // The fault waits for: "decode-N" running sequences, "prefill-N" a queue of prompt tokens, or
  // "" (the load is generating on the decode instances).
  const char* busy;
  std::vector<std::array<std::string, 3>> edits = {};
};

std::ostream& operator<<(std::ostream& os, const fault_case& c) {
  return os << c.config << " " << c.process << " " << (c.signal == SIGKILL ? "SIGKILL" : "SIGSTOP");
}

std::string case_name(const ::testing::TestParamInfo<fault_case>& info) {
  std::string name = std::string(info.param.config) + "_" + info.param.process + "_" +
                     (info.param.signal == SIGKILL ? "killed" : "hung");
  for (auto& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

double decode_running(const std::string& metrics) {
  double all = 0;
  for (int r = 0; r < 4; ++r) all += running_on(metrics, "decode-" + std::to_string(r));
  return all;
}

bool busy(const std::string& metrics, const std::string& instance) {
  if (instance.rfind("prefill-", 0) == 0)
    return metric(metrics, "supernode_prefill_outstanding_tokens", {{"instance", instance}})
               .value_or(0.0) >= 200;
  if (instance.rfind("decode-", 0) == 0) return running_on(metrics, instance) >= 1;
  return decode_running(metrics) >= 3;
}

class serving_fault_matrix : public ::testing::TestWithParam<fault_case> {};

} // namespace

TEST_P(serving_fault_matrix, the_fault_loses_no_request_and_the_process_comes_back) {
  const auto& c = GetParam();
  const bool prefill_target = std::string(c.busy).rfind("prefill-", 0) == 0;
  auto edits = c.edits;
  // Long prompts and a small budget when a prefill instance is the target: it has a queue.
  if (prefill_target) edits.push_back({"prefill", "token_budget", "64"});
  const auto prompts = prefill_target ? workload(10, 200, 8) : workload(8, 40, 200);
  for (auto& p : prompts) (void)reference_tokens(p); // while the cluster is not there to compete
  serving_cluster cluster(c.config, tiny_model_dir(), edits);
  ASSERT_TRUE(cluster.up());
  const pid_t before = pid_of(cluster, c.process);
  ASSERT_GT(before, 0);
  // The target takes work before the load goes out: a decode instance whose first load report
  // has not reached the scheduler yet gets no sequence, and the fault's moment never comes.
  if (const std::string target = c.busy; target.rfind("decode-", 0) == 0) {
    const auto [text, reporting] = poll_metrics(cluster.port(), [&](const std::string& m) {
      return metric(m, "supernode_kv_blocks_total", {{"instance", target}}).value_or(0.0) > 0;
    });
    ASSERT_TRUE(reporting) << target << " never reported its KV blocks:\n" << text;
  } else if (c.signal == SIGSTOP && prefill_target) {
    // A hung process is fenced by the peers that know its incarnation, from its heartbeats. The
    // scheduler places work on a config member it has not heard yet, so without this wait the
    // stop can land before any peer heard the target: declared down, but never fenced, it is
    // taken back as a slow starter when it wakes (docs/recovery.md). Its own load report, with
    // its plane counters, shows the scheduler's process has heard it on the control flow.
    const auto [text, reporting] = poll_metrics(cluster.port(), [&](const std::string& m) {
      return metric(m, "supernode_plane_bytes_sent", {{"instance", c.instance}}).has_value();
    });
    ASSERT_TRUE(reporting) << c.instance << " never reported to the scheduler:\n" << text;
  }
  expect_no_request_lost(
      cluster, prompts, [&](const std::string& m) { return busy(m, c.busy); },
      [&] { ASSERT_EQ(::kill(before, c.signal), 0); }, /*expect_resumed=*/false);
  if (c.signal == SIGSTOP) {
    // Hung past the liveness bound: the gateway's membership has it down (or the probe has
    // ended it) before it may wake.
    const auto [text, down] = poll_metrics(cluster.port(), [&](const std::string& m) {
      return metric(m, "supernode_member_alive", {{"instance", c.instance}}).value_or(1.0) == 0.0 ||
             ::kill(before, 0) != 0;
    });
    EXPECT_TRUE(down) << c.instance << " never went down:\n" << text;
    ::kill(before, SIGCONT);
  }
  // A new incarnation in its place (restarted after the kill, the probe's kill or its fencing).
  EXPECT_TRUE(eventually(
      [&] {
        const pid_t now = pid_of(cluster, c.process);
        return now > 0 && now != before && ::kill(before, 0) != 0;
      },
      std::chrono::seconds(90)))
      << "no new incarnation of " << c.process << "; logs:\n"
      << log_digest(cluster.run_dir());
  const auto [health, ok] = poll_metrics(cluster.port(), [&](const std::string&) {
    return http_call(cluster.port(), "GET", "/health").status == 200;
  });
  EXPECT_TRUE(ok) << health;
  expect_serves_the_reference(cluster);
}

INSTANTIATE_TEST_SUITE_P(
    every_process_kind, serving_fault_matrix,
    ::testing::Values(
        // pdc-ems: the pool's controller and a server, a prefill and a decode instance.
        fault_case{"pdc-ems.toml", "ems_controller-0", "mp_controller-0", SIGKILL, ""},
        fault_case{"pdc-ems.toml", "ems_controller-0", "mp_controller-0", SIGSTOP, ""},
        fault_case{"pdc-ems.toml", "ems-1", "mp_server-1", SIGKILL, ""},
        fault_case{"pdc-ems.toml", "ems-1", "mp_server-1", SIGSTOP, ""},
        fault_case{"pdc-ems.toml", "prefill-1", "prefill-1", SIGKILL, "prefill-1"},
        fault_case{"pdc-ems.toml", "prefill-1", "prefill-1", SIGSTOP, "prefill-1"},
        fault_case{"pdc-ems.toml", "decode-1", "decode-1", SIGKILL, "decode-1"},
        fault_case{"pdc-ems.toml", "decode-1", "decode-1", SIGSTOP, "decode-1"},
        // lep-ep4: a rank of the prefill group and of the decode group (the decode kill with the
        // group's re-forming is in serving_recovery).
        fault_case{"lep-ep4.toml", "prefill-1", "prefill-1", SIGKILL, "prefill-1"},
        fault_case{"lep-ep4.toml", "prefill-1", "prefill-1", SIGSTOP, "prefill-1"},
        fault_case{"lep-ep4.toml", "decode-2", "decode-2", SIGSTOP, "decode-2"},
        // split-attn-moe: the only prefill instance, an attention rank and an expert shard (its
        // kill is in serving_recovery).
        fault_case{"split-attn-moe.toml", "prefill-0", "prefill-0", SIGKILL, "prefill-0"},
        fault_case{"split-attn-moe.toml", "prefill-0", "prefill-0", SIGSTOP, "prefill-0"},
        fault_case{"split-attn-moe.toml", "decode-1", "decode-1", SIGKILL, "decode-1"},
        fault_case{"split-attn-moe.toml", "decode-1", "decode-1", SIGSTOP, "decode-1"},
        fault_case{"split-attn-moe.toml", "experts-1", "expert_shard-1", SIGSTOP, ""},
        // pdc-ha: the scheduler in a process of its own; the gateways hold their requests.
        fault_case{"pdc-ha.toml", "scheduler-0", "scheduler-0", SIGKILL, ""},
        fault_case{"pdc-ha.toml", "scheduler-0", "scheduler-0", SIGSTOP, ""}),
    case_name);
