#include "apps/bench/model_cache_pool.hpp"

#include "services/cluster/cluster_file.hpp"
#include "services/cluster/role_launch.hpp"
#include "services/serving/cluster_file.hpp"
#include "transport/heartbeat_clock.hpp"
#include "transport/shm_segment.hpp"

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <sys/mman.h>
#include <thread>
#include <unistd.h>

namespace supernode::apps {

namespace fs = std::filesystem;
namespace ems = services::ems;
namespace cl = services::cluster;

namespace {

// What every generated cluster holds; write_cluster sets its name, folders, seats and tiers.
constexpr const char* cluster_template = R"(# Written by `supernode bench model-cache`.
[cluster]
heartbeat_ms = 100
missed_heartbeats = 20

[planes.ub]
kind = "shm"
[planes.vpc]
kind = "zmq"
transport = "ipc"

[flows]
default = "vpc"
ems = "ub"

[process.ems_controller]
roles = ["mp_controller"]
threads = 1

[process.ems]
roles = ["mp_server"]
count = 2
threads = 1

# Never started as roles: the bench's loader threads take these instance names.
[process.loader]
roles = ["loader"]

[ems]
read_path = "ub"
timeout_ms = 60000
)";

constexpr auto ready_timeout = std::chrono::seconds(60);
constexpr auto stop_grace = std::chrono::seconds(15);

} // namespace

cluster_files write_cluster(const fs::path& work, int loaders, uint64_t dram_bytes,
                            uint64_t ssd_bytes) {
  cluster_files c;
  c.name = "model-cache-" + std::to_string(::getpid());
  c.run_dir = work / "run";
  c.config_file = work / "cluster.toml";
  fs::create_directories(c.run_dir / "logs");
  cl::cluster_file(cluster_template)
      .own_cluster(c.name, c.run_dir)
      .set("process.loader", "count", std::to_string(loaders))
      .set("ems", "dram_bytes", std::to_string(dram_bytes))
      .set("ems", "ssd_bytes", std::to_string(ssd_bytes))
      .write(c.config_file);
  c.cluster = transport::cluster_config::load(c.config_file);
  c.ems = services::cluster_file::load(c.config_file).serving.ems;
  return c;
}

void await_pool_answers(ems::pool_session& session, const cluster_files& c) {
  auto config = c.ems;
  config.timeout_ms = 500;
  ems::ems_client probe(session.endpoint(), config);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    if (probe.refresh_ring() && probe.servers().size() == 2) {
      const auto failed = probe.stats().failed_calls;
      probe.list("bench-probe"); // one call to each server
      if (probe.stats().failed_calls == failed) return;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("the MP controller and both MP servers did not all answer within "
                               "30 s (logs in " +
                               (c.run_dir / "logs").string() + ")");
    std::this_thread::sleep_for(c.cluster.heartbeat_interval);
  }
}

pool_cluster::pool_cluster(const cluster_files& c, const std::string& operator_name) {
  stop_on_signal_ = std::make_unique<on_stop_signal>([this, name = c.name] {
    stop_all();
    for (const auto& segment : transport::list_segments(name))
      ::shm_unlink(("/" + segment).c_str());
  });
  try {
    start(c, "ems_controller", 0);
    for (int i = 0; i < 2; ++i) start(c, "ems", i);
    session_ = std::make_unique<ems::pool_session>(c.cluster, operator_name,
                                                   transport::new_incarnation(), c.ems);
    try {
      await_pool_answers(*session_, c);
    } catch (const std::exception& e) {
      throw std::runtime_error("bench model-cache: " + operator_name + ": " + e.what());
    }
    session_->client().refresh_ring(); // subscribes to the controller's pushes
  } catch (...) {
    session_.reset();
    stop_on_signal_.reset();
    stop_all();
    throw;
  }
}

pool_cluster::~pool_cluster() {
  session_.reset();
  stop_on_signal_.reset(); // before the children are touched here: the step uses them too
  stop_all();
}

// `supernode role PROCESS --config F --id N`, its output into its log, and its "ready" line.
void pool_cluster::start(const cluster_files& c, const std::string& process, int id) {
  const auto log = c.run_dir / "logs" / (process + "-" + std::to_string(id) + ".log");
  children_.push_back(cl::launch_role({process, id, c.config_file, std::nullopt, log, false, {}}));
  const auto name = process + " " + std::to_string(id);
  if (const auto failure = cl::wait_until_ready({{name, &children_.back(), log}}, ready_timeout))
    throw std::runtime_error("bench model-cache: " + failure->describe());
}

// All at once, newest first, then each waited for (SIGKILL after the grace).
void pool_cluster::stop_all() {
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) it->signal(SIGTERM);
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
    if (it->wait_for(stop_grace)) continue;
    std::fprintf(stderr, "bench model-cache: pid %d ignored SIGTERM for %lld s: killing it\n",
                 static_cast<int>(it->pid()), static_cast<long long>(stop_grace.count()));
    it->kill();
  }
}

} // namespace supernode::apps
