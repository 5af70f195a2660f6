#include "transport/cluster_config.hpp"

#include <gtest/gtest.h>

using namespace supernode::transport;

namespace {
constexpr const char* shape = R"(
[cluster]
name = "t1"
run_dir = "/tmp/sn-t1"
heartbeat_ms = 50

[planes.vpc]
kind = "zmq"
[planes.rdma]
kind = "zmq"
transport = "tcp"
base_port = 20000
[planes.ub]
kind = "shm"

[flows]
control = "vpc"
bulk = "rdma"
dispatch = "ub"

[process.prefill]
roles = ["prefill"]
count = 2

[process.decode]
roles = ["decode", "expert_shard"]
)";

std::string error_of(const std::string& text) {
  try {
    cluster_config::parse(text, "shape.toml");
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
} // namespace

TEST(cluster_config, expands_processes_into_instances_and_addresses) {
  auto c = cluster_config::parse(shape, "shape.toml");
  EXPECT_EQ(c.name, "t1");
  EXPECT_EQ(c.heartbeat_interval.count(), 50);
  auto all = c.instances();
  ASSERT_EQ(all.size(), 4u);
  // Processes in name order (TOML tables are unordered), roles in their listed order.
  EXPECT_EQ(all[0].name, "decode-0");
  EXPECT_EQ(all[1].name, "expert_shard-0");
  EXPECT_EQ(all[2].name, "prefill-0");
  EXPECT_EQ(all[3].name, "prefill-1");
  auto d = c.instances_of("decode", 0);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(c.plane_for_flow("control").name, "vpc");
  EXPECT_EQ(c.address(all[3], c.planes.at("vpc"), "control"),
            "ipc:///tmp/sn-t1/prefill-1.vpc.control");
  EXPECT_EQ(c.address(all[3], c.planes.at("rdma"), "bulk"),
            "tcp://127.0.0.1:20010"); // base + 3 x ordinal + 1 (bulk)
  EXPECT_EQ(c.address(all[3], c.planes.at("rdma"), "ep"), "tcp://127.0.0.1:20011");
  EXPECT_THROW(c.instances_of("decode", 1), std::runtime_error);
  EXPECT_THROW(c.instances_of("gateway", 0), std::runtime_error);
  EXPECT_THROW(c.plane_for_flow("ems"), std::runtime_error);
}

TEST(cluster_config, malformed_shapes_name_the_key) {
  EXPECT_NE(error_of("[planes.x]\nkind = \"rdma\"\n").find("planes.x.kind"), std::string::npos);
  EXPECT_NE(
      error_of("[planes.x]\nkind = \"zmq\"\n[flows]\ncontrol = \"y\"\n").find("unknown plane 'y'"),
      std::string::npos);
  EXPECT_NE(error_of("[process.a]\ncount = 2\n").find("process.a.roles"), std::string::npos);
  EXPECT_NE(error_of("[process.a]\nroles = [\"x\"]\n[process.b]\nroles = [\"x\"]\n")
                .find("'x-0' is hosted by two processes"),
            std::string::npos);
  EXPECT_NE(error_of("[cluster\nname = 1").find("shape.toml"), std::string::npos);
  EXPECT_NE(error_of("[cluster]\nheartbeat_ms = \"fast\"\n").find("cluster.heartbeat_ms"),
            std::string::npos);
}
