#include "transport/cluster_config.hpp"
#include "transport/config_schema.hpp"

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

TEST(cluster_config, malformed_shapes_name_the_table_and_key) {
  EXPECT_EQ(error_of("[planes.x]\nkind = \"rdma\"\n"),
            "shape.toml:2: [planes.x] kind must be one of inproc, shm, zmq, got \"rdma\"");
  EXPECT_EQ(error_of("[planes.x]\ntransport = \"tcp\"\n"),
            "shape.toml:1: [planes.x] kind is required (a string: inproc, shm, zmq)");
  EXPECT_EQ(error_of("[planes.x]\nkind = \"zmq\"\ntransport = \"tcp\"\n"),
            "shape.toml:1: [planes.x] base_port must be in [1, 65000] for zmq over tcp");
  EXPECT_EQ(error_of("[planes.x]\nkind = \"zmq\"\n[flows]\ncontrol = \"y\"\n"),
            "shape.toml:4: [flows] control names unknown plane 'y' (did you mean 'x'?)");
  EXPECT_EQ(error_of("[process.a]\ncount = 2\n"),
            "shape.toml:1: [process.a] roles is required (an array of strings)");
  EXPECT_EQ(error_of("[process.a]\nroles = []\n"),
            "shape.toml:2: [process.a] roles must be a non-empty array of role names");
  EXPECT_EQ(error_of("[process.a]\nroles = [\"x\"]\n[process.b]\nroles = [\"x\"]\n"),
            "shape.toml:3: [process.b] instance 'x-0' is hosted by two processes");
  EXPECT_EQ(error_of("[cluster]\nname = \"a.b\"\n"),
            "shape.toml:2: [cluster] name must be non-empty without '/', '.' or spaces");
  EXPECT_EQ(error_of("[cluster]\nheartbeat_ms = \"fast\"\n"),
            "shape.toml:2: [cluster] heartbeat_ms must be an integer, got a string");
  EXPECT_EQ(error_of("[cluster]\nmissed_heartbeats = 0\n"),
            "shape.toml:2: [cluster] missed_heartbeats must be in [1, 10000], got 0");
  EXPECT_EQ(error_of("[process.a]\nroles = [\"x\"]\ncpus = [0, 5000]\n"),
            "shape.toml:3: [process.a] cpus[1] must be in [0, 4095], got 5000");
  EXPECT_EQ(error_of("[planes]\nkind = \"zmq\"\n"),
            "shape.toml:2: [planes.kind] must be a table, got a string");
  EXPECT_EQ(error_of("[cluster\nname = 1").rfind("shape.toml:", 0), 0u);
}

TEST(cluster_config, misspelled_keys_and_flows_suggest_the_nearest) {
  EXPECT_EQ(error_of("[process.a]\nroles = [\"x\"]\ncuont = 2\n"),
            "shape.toml:3: [process.a] unknown key 'cuont' (did you mean 'count'?)");
  EXPECT_EQ(error_of("[planes.ub]\nkind = \"shm\"\n[flows]\ndispach = \"ub\"\n"),
            "shape.toml:4: [flows] unknown key 'dispach' (did you mean 'dispatch'?)");
  EXPECT_EQ(error_of("[cluster]\nheartbeat = 50\n"),
            "shape.toml:2: [cluster] unknown key 'heartbeat' (did you mean 'heartbeat_ms'?)");
  EXPECT_EQ(error_of("[planes.rdma]\nkind = \"zmq\"\n[flows]\nbulk = \"rmda\"\n"),
            "shape.toml:4: [flows] bulk names unknown plane 'rmda' (did you mean 'rdma'?)");
  EXPECT_EQ(error_of("[planes.ub]\nkind = \"shm\"\nring_byte = 4096\n"),
            "shape.toml:3: [planes.ub] unknown key 'ring_byte' (did you mean 'ring_bytes'?)");
}

TEST(cluster_config, leaves_tables_it_does_not_own_to_their_readers) {
  // services::cluster_file reads [model] and the others, and rejects tables nobody knows.
  auto c =
      cluster_config::parse("[model]\npath = \"m\"\n[process.a]\nroles = [\"x\"]\n", "shape.toml");
  EXPECT_EQ(c.instances().size(), 1u);
}

TEST(cluster_config, documents_every_key_it_reads) {
  const auto tables = cluster_config::tables();
  ASSERT_EQ(tables.size(), 4u);
  std::vector<std::string> names;
  for (auto& t : tables) names.push_back(t.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"cluster", "planes.<name>", "flows", "process.<name>"}));
  auto keys_of = [&](size_t i) {
    std::vector<std::string> keys;
    for (auto& k : tables[i].keys) keys.push_back(k.name);
    return keys;
  };
  EXPECT_EQ(keys_of(0), (std::vector<std::string>{"name", "run_dir", "key_dir", "heartbeat_ms",
                                                  "missed_heartbeats"}));
  EXPECT_EQ(keys_of(2),
            (std::vector<std::string>{"default", "control", "bulk", "dispatch", "ems"}));
  EXPECT_EQ(tables[0].keys[3].default_value, "`100`");
  EXPECT_EQ(tables[1].keys[0].range, "required; inproc, shm, zmq");
}
