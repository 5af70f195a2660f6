// Fault plans: what a plan says, what a bad one is told, and where each target lands.

#include "services/chaos/fault_plan.hpp"
#include "transport/cluster_config.hpp"
#include "transport/config_document.hpp"

#include <filesystem>
#include <gtest/gtest.h>
#include <set>

namespace chaos = supernode::services::chaos;
using supernode::transport::cluster_config;

namespace {

std::string error_of(const std::string& plan) {
  try {
    chaos::parse_fault_plan(plan, "plan.toml");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "accepted";
}

// pdc-ems's shape: gateway+scheduler, a controller, two servers, two prefill, two decode; and a
// process with two decode ranks as threads.
const char* topology = R"(
[cluster]
name = "shape"
run_dir = "/tmp/fault-plan-test"
[planes.vpc]
kind = "zmq"
[flows]
control = "vpc"
bulk = "vpc"
[process.gateway]
roles = ["gateway", "scheduler"]
[process.ems]
roles = ["mp_server"]
count = 2
[process.prefill]
roles = ["prefill"]
count = 2
[process.decode]
roles = ["decode"]
count = 2
per_process = 2
)";

cluster_config shape() {
  return cluster_config::parse(topology, "shape.toml");
}

chaos::fault_spec kill_of(const std::string& target, const std::string& role = "") {
  chaos::fault_spec f;
  f.index = 3;
  f.kind = chaos::fault_kind::kill;
  f.target = target;
  f.role = role;
  return f;
}

} // namespace

TEST(chaos_fault_plan, reads_every_key_of_every_fault) {
  const auto plan = chaos::parse_fault_plan(R"(
[[fault]]
at_s = 4
kind = "kill"
target = "decode-1"

[[fault]]
at_s = 2.5
kind = "delay"
role = "prefill"
flow = "bulk"
duration_s = 3.0
rate = 0.25
delay_ms = 200
)",
                                            "plan.toml");
  ASSERT_EQ(plan.faults.size(), 2u);
  const auto& kill = plan.faults[0];
  EXPECT_EQ(kill.index, 0u);
  EXPECT_EQ(kill.kind, chaos::fault_kind::kill);
  EXPECT_EQ(kill.at_s, 4.0); // an integer is a number of seconds too
  EXPECT_EQ(kill.target, "decode-1");
  EXPECT_EQ(kill.rate, 1.0);
  const auto& delay = plan.faults[1];
  EXPECT_EQ(delay.index, 1u);
  EXPECT_EQ(delay.kind, chaos::fault_kind::delay);
  EXPECT_TRUE(chaos::is_plane_fault(delay.kind));
  EXPECT_EQ(delay.role, "prefill");
  EXPECT_EQ(delay.flow, "bulk");
  EXPECT_EQ(delay.duration_s, 3.0);
  EXPECT_EQ(delay.rate, 0.25);
  EXPECT_EQ(delay.delay_ms, 200);
}

TEST(chaos_fault_plan, a_bad_plan_is_told_which_fault_and_key) {
  const std::string kill = "[[fault]]\nat_s = 1.0\nkind = \"kill\"\ntarget = \"decode-0\"\n";
  EXPECT_NE(error_of(kill + "[[fault]]\nat_s = 1.0\nkind = \"kil\"\n")
                .find("plan.toml:7: [fault.1] kind must be one of kill, stop, drop"),
            std::string::npos)
      << error_of(kill + "[[fault]]\nat_s = 1.0\nkind = \"kil\"\n");
  EXPECT_NE(error_of(kill + "[[fault]]\nat_s = 1.0\nkind = \"kill\"\ntarget = \"x\"\nrat = 1.0\n")
                .find("[fault.1] unknown key 'rat' (did you mean 'rate'?)"),
            std::string::npos);
  EXPECT_NE(error_of("[[fault]]\nat_s = 1.0\nkind = \"drop\"\nduration_s = 1.0\n")
                .find("[fault.0] flow is required for a drop fault"),
            std::string::npos);
  EXPECT_NE(error_of("[[fault]]\nat_s = 1.0\nkind = \"kill\"\n")
                .find("[fault.0] target (or role) is required for a kill fault"),
            std::string::npos);
  EXPECT_NE(error_of("[[fault]]\nat_s = 1.0\nkind = \"stop\"\ntarget = \"decode-0\"\n")
                .find("[fault.0] duration_s must be > 0 for a stop fault"),
            std::string::npos);
  EXPECT_NE(error_of(kill + "role = \"decode\"\n").find("[fault.0] role and target are both given"),
            std::string::npos);
  EXPECT_NE(error_of("[[fault]]\nat_s = 1.0\nkind = \"drop\"\nflow = \"control\"\n"
                     "duration_s = 1.0\nrate = 1.5\n")
                .find("[fault.0] rate must be in (0, 1], got 1.5"),
            std::string::npos);
  EXPECT_NE(error_of("[[fault]]\nat_s = 1.0\nkind = \"delay\"\nflow = \"control\"\n"
                     "duration_s = 1.0\n")
                .find("[fault.0] delay_ms is required for a delay fault"),
            std::string::npos);
  EXPECT_NE(error_of("[faults]\nat_s = 1.0\n").find("unknown table [faults]"), std::string::npos);
  EXPECT_NE(error_of("").find("no [[fault]]"), std::string::npos);
}

TEST(chaos_fault_plan, a_target_is_an_instance_first_then_a_process_slot) {
  const auto cluster = shape();
  // Instance decode-1 is a thread of process slot decode-0 (two ranks per process).
  auto t = chaos::resolve_target(kill_of("decode-1"), cluster, 0);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->slot, "decode-0");
  EXPECT_EQ(t->named, "decode-1");
  EXPECT_EQ(t->instances, (std::vector<std::string>{"decode-0", "decode-1"}));
  // scheduler-0 lives in the gateway's process; "ems-1" is only a slot.
  EXPECT_EQ(chaos::resolve_target(kill_of("scheduler-0"), cluster, 0)->slot, "gateway-0");
  t = chaos::resolve_target(kill_of("ems-1"), cluster, 0);
  EXPECT_EQ(t->process, "ems");
  EXPECT_EQ(t->index, 1);
  EXPECT_EQ(t->instances, (std::vector<std::string>{"mp_server-1"}));
  try {
    chaos::resolve_target(kill_of("decode-9"), cluster, 0);
    FAIL() << "resolved decode-9";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("fault 3: target 'decode-9'"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(chaos::resolve_target(kill_of("", "mp_controller"), cluster, 0), std::runtime_error);
  chaos::fault_spec everywhere;
  everywhere.kind = chaos::fault_kind::drop;
  EXPECT_FALSE(chaos::resolve_target(everywhere, cluster, 0));
}

TEST(chaos_fault_plan, a_role_picks_one_of_its_instances_from_the_seed) {
  const auto cluster = shape();
  std::set<std::string> picked;
  for (uint64_t seed = 0; seed < 32; ++seed) {
    const auto t = chaos::resolve_target(kill_of("", "prefill"), cluster, seed);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->named, t->instances.at(0));
    EXPECT_EQ(t->slot, t->named); // prefill-N runs alone in slot prefill-N
    EXPECT_EQ(chaos::resolve_target(kill_of("", "prefill"), cluster, seed)->named, t->named);
    picked.insert(t->named);
  }
  EXPECT_EQ(picked, (std::set<std::string>{"prefill-0", "prefill-1"}));
}

TEST(chaos_fault_plan, every_shipped_plan_reads_and_lands_in_pdc_ems) {
  namespace fs = std::filesystem;
  const fs::path source(SUPERNODE_SOURCE_DIR);
  const auto cluster = cluster_config::from(
      supernode::transport::config_document::load(source / "configs" / "pdc-ems.toml"));
  size_t plans = 0;
  for (const auto& entry : fs::directory_iterator(source / "configs" / "faults")) {
    if (entry.path().extension() != ".toml") continue;
    ++plans;
    const auto plan = chaos::load_fault_plan(entry.path());
    for (const auto& f : plan.faults)
      EXPECT_NO_THROW(chaos::resolve_target(f, cluster, 0)) << entry.path();
  }
  EXPECT_GE(plans, 7u);
}
