// The compose file of a shape, read as text: what each service runs, mounts, restarts and probes.
#include "services/compose/compose_file.hpp"
#include "services/compose/compose_project.hpp"
#include "transport/toml_edit.hpp"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

namespace supernode::services::compose {
namespace {

const std::string shape = R"([cluster]
name = "shape"
run_dir = "/tmp/supernode-shape"
[planes.vpc]
kind = "zmq"
[planes.rdma]
kind = "zmq"
[planes.ub]
kind = "shm"
[flows]
control = "vpc"
bulk = "rdma"
[process.gateway]
roles = ["gateway", "scheduler"]
threads = 1
[process.ems]
roles = ["mp_server"]
count = 2
restart = "always"
[process.decode]
roles = ["decode"]
count = 2
threads = 2
cpus = [1, 3]
restart = "never"
)";

// The lines of service `name`'s block (up to the next service at two spaces' indent).
std::string service_block(const std::string& yaml, const std::string& name) {
  const auto at = yaml.find("\n  " + name + ":\n");
  if (at == std::string::npos) return "";
  const auto body = at + name.size() + 5;
  auto end = body;
  while ((end = yaml.find('\n', end)) != std::string::npos && end + 1 < yaml.size() &&
         (yaml.compare(end + 1, 4, "    ") == 0 || yaml.compare(end + 1, 3, "  #") == 0))
    ++end;
  return yaml.substr(body, end == std::string::npos ? std::string::npos : end - body);
}

compose_options options_for(const std::string& network) {
  compose_options o;
  o.network = network;
  o.config_file = "../../configs/shape.toml";
  o.models_dir = "../../models";
  o.faults_dir = "../../configs/faults";
  o.command_line = "supernode compose --config configs/shape.toml";
  return o;
}

TEST(ComposeFile, OneServicePerProcessSlotRunningItsRoleById) {
  const auto yaml =
      compose_yaml(transport::cluster_config::parse(shape, "shape"), options_for("host"));
  for (auto name : {"gateway-0", "ems-0", "ems-1", "decode-0", "decode-1"})
    EXPECT_FALSE(service_block(yaml, name).empty()) << name << "\n" << yaml;
  EXPECT_NE(service_block(yaml, "decode-1")
                .find(R"(command: ["decode", "--config", "/srv/supernode/configs/shape.toml", )"
                      R"("--id", "1"])"),
            std::string::npos)
      << yaml;
  EXPECT_EQ(service_block(yaml, "decode-2"), "");
}

TEST(ComposeFile, RestartPolicyAndResourcesComeFromTheConfig) {
  const auto yaml =
      compose_yaml(transport::cluster_config::parse(shape, "shape"), options_for("host"));
  const auto decode = service_block(yaml, "decode-0");
  EXPECT_NE(decode.find("restart: \"no\"\n"), std::string::npos) << decode;
  EXPECT_NE(decode.find("cpus: 2\n"), std::string::npos) << decode;
  EXPECT_NE(decode.find("cpuset: \"1,3\"\n"), std::string::npos) << decode;
  EXPECT_NE(service_block(yaml, "ems-1").find("restart: always\n"), std::string::npos);
  EXPECT_NE(service_block(yaml, "gateway-0").find("restart: on-failure\n"), std::string::npos);
}

TEST(ComposeFile, EveryServiceHasAHealthcheckNamingItsInstance) {
  const auto yaml =
      compose_yaml(transport::cluster_config::parse(shape, "shape"), options_for("host"));
  EXPECT_NE(service_block(yaml, "ems-1")
                .find(R"("health", "--config", )"
                      R"("/srv/supernode/configs/shape.toml", )"
                      R"("--instance", "mp_server-1"])"),
            std::string::npos)
      << yaml;
  EXPECT_NE(service_block(yaml, "gateway-0").find(R"("--instance", "gateway-0"])"),
            std::string::npos);
}

TEST(ComposeFile, SsdTiersOnNamedVolumesAndTheRunFolderShared) {
  const auto yaml =
      compose_yaml(transport::cluster_config::parse(shape, "shape"), options_for("host"));
  EXPECT_NE(service_block(yaml, "ems-1")
                .find("- ems-ssd-mp-server-1:/tmp/supernode-shape/ems/mp_server-1\n"),
            std::string::npos)
      << yaml;
  EXPECT_EQ(service_block(yaml, "ems-0").find("mp-server-1"), std::string::npos);
  for (auto name : {"gateway-0", "decode-1", "ems-0"}) {
    const auto block = service_block(yaml, name);
    EXPECT_NE(block.find("- run:/tmp/supernode-shape\n"), std::string::npos) << name;
    EXPECT_NE(block.find("- ../../configs/shape.toml:/srv/supernode/configs/shape.toml:ro\n"),
              std::string::npos)
        << name;
    EXPECT_NE(block.find("ipc: service:namespaces\n"), std::string::npos) << name;
  }
  EXPECT_NE(yaml.find("\nvolumes:\n  run: {}\n  ems-ssd-mp-server-0: {}\n  "
                      "ems-ssd-mp-server-1: {}\n"),
            std::string::npos)
      << yaml;
}

TEST(ComposeFile, DecodeScalesByJoiningOnceTheSlotsAreHealthy) {
  const auto yaml =
      compose_yaml(transport::cluster_config::parse(shape, "shape"), options_for("host"));
  const auto decode = service_block(yaml, "decode");
  EXPECT_NE(decode.find("scale: 0\n"), std::string::npos) << yaml;
  EXPECT_NE(decode.find(R"("--join", "gateway-0,scheduler-0"])"), std::string::npos) << decode;
  EXPECT_NE(decode.find("stop_grace_period: 70s\n"), std::string::npos) << decode;
  EXPECT_NE(decode.find("      ems-1:\n        condition: service_healthy\n"), std::string::npos)
      << decode;
  // MP servers join too: the controller hands the joiner its blocks before clients use it.
  const auto ems = service_block(yaml, "ems");
  EXPECT_NE(ems.find("scale: 0\n"), std::string::npos) << yaml;
  EXPECT_NE(ems.find(R"("--join", "gateway-0,scheduler-0"])"), std::string::npos) << ems;
}

TEST(ComposeFile, HostNetworkingOrABridgeNetworkOfItsOwn) {
  const auto cluster = transport::cluster_config::parse(shape, "shape");
  const auto host = compose_yaml(cluster, options_for("host"));
  EXPECT_NE(service_block(host, "decode-0").find("network_mode: host\n"), std::string::npos);
  EXPECT_EQ(host.find("\nnetworks:"), std::string::npos);
  const auto bridge = compose_yaml(cluster, options_for("bridge"));
  EXPECT_NE(service_block(bridge, "decode-0").find("networks: [planes]\n"), std::string::npos);
  EXPECT_NE(service_block(bridge, "decode-0").find("hostname: decode-0\n"), std::string::npos);
  EXPECT_NE(bridge.find("\nnetworks:\n  planes:\n    driver: bridge\n"), std::string::npos);
  EXPECT_THROW(compose_yaml(cluster, options_for("overlay")), std::invalid_argument);
}

TEST(ComposeFile, BridgeConfigPutsEveryInstanceOnTcpAtItsServiceName) {
  const auto cluster = transport::cluster_config::parse(shape, "shape");
  const auto bridged =
      transport::cluster_config::parse(bridge_config_text(shape, cluster), "bridged");
  const auto& decode = bridged.instance("decode-1");
  const auto& vpc = bridged.planes.at("vpc");
  const auto& rdma = bridged.planes.at("rdma");
  EXPECT_EQ(bridged.address(decode, vpc, "control").rfind("tcp://decode-1:", 0), 0u);
  EXPECT_EQ(bridged.address(bridged.instance("mp_server-0"), rdma, "bulk").rfind("tcp://ems-0:", 0),
            0u);
  EXPECT_NE(vpc.base_port, rdma.base_port);
}

TEST(ComposeFile, ChaosServiceUnderItsProfileSignalsThroughTheSharedPidNamespace) {
  const auto cluster = transport::cluster_config::parse(shape, "shape");
  const auto host = compose_yaml(cluster, options_for("host"));
  const auto chaos = service_block(host, "chaos");
  EXPECT_NE(chaos.find("profiles: [chaos]\n"), std::string::npos) << host;
  EXPECT_NE(
      chaos.find(R"(entrypoint: ["supernode", "chaos", "--attach", "--config", )"
                 R"("/srv/supernode/configs/shape.toml", "--model", "/srv/supernode/models/demo", )"
                 R"("--json", "--report", )"
                 R"("/srv/supernode/chaos-reports/${SUPERNODE_CHAOS_REPORT:-)"
                 R"(chaos-report.json}"])"),
      std::string::npos)
      << chaos;
  EXPECT_NE(chaos.find("pid: service:namespaces\n"), std::string::npos) << chaos;
  EXPECT_NE(chaos.find("network_mode: host\n"), std::string::npos) << chaos;
  EXPECT_NE(chaos.find("- ${SUPERNODE_FAULTS:-../../configs/faults}:/srv/supernode/faults:ro\n"),
            std::string::npos)
      << chaos;
  EXPECT_NE(chaos.find("- ${SUPERNODE_CHAOS_REPORTS:-./chaos-reports}:"
                       "/srv/supernode/chaos-reports\n"),
            std::string::npos)
      << chaos;
  EXPECT_NE(chaos.find("      decode-1:\n        condition: service_healthy\n"), std::string::npos)
      << chaos;
  // On a bridge network the gateway listens on its container's loopback: chaos joins it there.
  const auto bridge = compose_yaml(cluster, options_for("bridge"));
  EXPECT_NE(service_block(bridge, "chaos").find("network_mode: service:gateway-0\n"),
            std::string::npos)
      << bridge;
}

TEST(ComposeFile, SwarmHasDeployKeysAnOverlayNetworkAndNoSharedNamespaces) {
  const auto cluster = transport::cluster_config::parse(shape, "shape");
  const auto swarm = compose_yaml(cluster, options_for("swarm"));
  const auto decode = service_block(swarm, "decode-0");
  EXPECT_NE(decode.find("    deploy:\n      replicas: 1\n      endpoint_mode: dnsrr\n"
                        "      restart_policy:\n        condition: none\n"
                        "      resources:\n        limits:\n          cpus: \"2\"\n"),
            std::string::npos)
      << decode;
  EXPECT_NE(decode.find("hostname: decode-0\n"), std::string::npos) << decode;
  EXPECT_NE(decode.find("networks: [planes]\n"), std::string::npos) << decode;
  EXPECT_NE(decode.find("target: /dev/shm\n"), std::string::npos) << decode;
  EXPECT_NE(service_block(swarm, "ems-1").find("condition: any\n"), std::string::npos);
  EXPECT_NE(service_block(swarm, "decode").find("replicas: 0\n"), std::string::npos) << swarm;
  for (const char* absent : {"ipc:", "pid:", "depends_on:", "scale:", "cpuset:", "restart: ",
                             "network_mode: host", "\n  namespaces:", "\n  chaos:"})
    EXPECT_EQ(swarm.find(absent), std::string::npos) << absent << "\n" << swarm;
  EXPECT_NE(swarm.find("\nnetworks:\n  planes:\n    driver: overlay\n    attachable: true\n"),
            std::string::npos)
      << swarm;
}

TEST(ComposeFile, SwarmConfigPutsTheShmPlanesOnTcpToo) {
  const auto cluster = transport::cluster_config::parse(shape, "shape");
  const auto swarmed = transport::cluster_config::parse(
      bridge_config_text(shape, cluster, /*shm_planes_too=*/true), "swarmed");
  const auto& ub = swarmed.planes.at("ub");
  EXPECT_EQ(ub.kind, "zmq");
  EXPECT_EQ(swarmed.heartbeat_interval, std::chrono::milliseconds(500));
  EXPECT_EQ(swarmed.missed_heartbeats, 30);
  EXPECT_EQ(
      swarmed.address(swarmed.instance("decode-1"), ub, "dispatch").rfind("tcp://decode-1:", 0),
      0u);
  const auto bridged =
      transport::cluster_config::parse(bridge_config_text(shape, cluster), "bridged");
  EXPECT_EQ(bridged.planes.at("ub").kind, "shm");
}

TEST(ComposeProject, PathsAreRelativeToTheComposeFile) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("compose-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir / "configs");
  std::ofstream(dir / "configs" / "shape.toml") << shape;
  compose_request request;
  request.config = dir / "configs" / "shape.toml";
  request.models = dir / "models";
  request.network = "bridge";
  EXPECT_THROW(make_compose(request), std::invalid_argument); // bridge writes beside --out
  request.out = dir / "docker" / "compose" / "shape.bridge.yml";
  const auto made = make_compose(request);
  EXPECT_EQ(made.bridge_config, dir / "docker" / "compose" / "shape.bridge.toml");
  EXPECT_NE(made.yaml.find("- ./shape.bridge.toml:/srv/supernode/configs/shape.bridge.toml:ro\n"),
            std::string::npos)
      << made.yaml;
  EXPECT_NE(made.yaml.find("- ${SUPERNODE_MODELS:-../../models}:/srv/supernode/models:ro\n"),
            std::string::npos);
  EXPECT_NE(
      made.yaml.find("- ${SUPERNODE_FAULTS:-../../configs/faults}:/srv/supernode/faults:ro\n"),
      std::string::npos);
  request.network = "swarm";
  request.out = dir / "docker" / "compose" / "shape.swarm.yml";
  EXPECT_EQ(make_compose(request).bridge_config, dir / "docker" / "compose" / "shape.swarm.toml");
  std::filesystem::remove_all(dir);
}

} // namespace
} // namespace supernode::services::compose
