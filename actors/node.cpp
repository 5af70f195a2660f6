#include "actors/node.hpp"

#include "actors/protocol/type_ids.hpp"
#include "actors/role/role_actor.hpp"
#include "kernels/thread_pool.hpp"
#include "services/ems/model_fetch.hpp"
#include "services/role_registry.hpp"
#include "transport/plane_factory.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <sched.h>
#include <unistd.h>

namespace supernode::actors {

namespace {
struct node_config : caf::actor_system_config {
  node_config() {
    add_message_types<caf::id_block::supernode>();
    // Role actors mostly relay between plane threads and logic: sharing beats stealing for
    // latency on two cores (toolchain.md measurements).
    set("scheduler.policy", caf::atom("sharing"));
  }
};

void apply_placement(const transport::process_config& p) {
  if (!p.cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : p.cpus) CPU_SET(cpu, &set);
    // Before any thread starts, so every thread of the process inherits the mask.
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      log::process().warn("cannot pin the process to its cpus: {}", std::strerror(errno));
  }
  const int threads = p.threads > 0 ? p.threads : static_cast<int>(p.cpus.size());
  if (threads > 0) kernels::thread_pool::configure_shared(threads);
}

bool needs_model(const std::vector<transport::instance_config>& instances) {
  for (auto& i : instances)
    if (i.role == "prefill" || i.role == "decode" || i.role == "expert_shard") return true;
  return false;
}

services::drain_mode drain_mode_of(int sig, const services::serving_config& serving) {
  if (sig == services::drain_finish_signal) return services::drain_mode::finish;
  if (sig == services::drain_migrate_signal) return services::drain_mode::migrate;
  return serving.decode_drain; // SIGTERM
}

// Drains every instance of the process and returns once all are drained, or at once when another
// stop signal comes (SIGINT, or the supervisor's patience ending in SIGKILL anyway).
void drain(const std::vector<services::role_instance>& roles,
           const std::vector<transport::instance_config>& instances, uint64_t incarnation,
           services::drain_mode mode, const sigset_t& stop_signals) {
  for (size_t i = 0; i < roles.size(); ++i) {
    log::logger{instances[i].name, incarnation}.info("draining ({})", services::to_string(mode));
    services::logic_of(roles[i]).drain(mode);
  }
  auto all_drained = [&] {
    return std::all_of(roles.begin(), roles.end(),
                       [](auto& r) { return services::logic_of(r).drained(); });
  };
  // The instances drain on their own threads; this thread only looks every 20 ms, and a signal
  // ends the wait sooner.
  const timespec look_again{0, 20'000'000};
  while (!all_drained())
    if (sigtimedwait(&stop_signals, nullptr, &look_again) > 0) return;
}

} // namespace

int run_node(const transport::cluster_config& cluster, const services::serving_config& serving,
             const std::string& process, int index,
             std::vector<transport::endpoint::join_seed> join_seeds) {
  const auto instances = cluster.instances_of(process, index);
  for (auto& p : cluster.processes)
    if (p.name == process) apply_placement(p);
  // Block the stop signals before any thread starts, so only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, services::drain_finish_signal, services::drain_migrate_signal})
    sigaddset(&stop_signals, sig);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // One incarnation per process start: peers tell a restarted instance from the old one.
  const uint64_t incarnation = transport::new_incarnation();
  // Logic first: loading a model or binding a port may fail, and should before any actor runs.
  // With the model cache, the model comes through the pool into a local copy first.
  services::serving_config effective = serving;
  if (serving.ems.model_cache && !instances.empty() && needs_model(instances)) {
    auto fetched = services::ems::fetch_model_through_pool(cluster, serving, instances.front().name,
                                                           incarnation);
    effective.model_name = serving.model_id();
    effective.model_path = fetched.dir;
  }
  std::vector<services::role_instance> roles;
  for (auto& inst : instances)
    roles.push_back(
        services::make_role({inst, cluster, effective, log::logger{inst.name, incarnation}}));

  // A fenced instance (peers declared it down after a hang and recovered its work) ends the
  // process with EX_TEMPFAIL: its supervisor restarts it as a new incarnation, with none of
  // the stale state.
  static std::atomic<bool> fenced{false};
  auto on_fenced = [](const std::string&, const std::string&) {
    fenced = true;
    ::kill(::getpid(), SIGTERM); // the sigwait below wakes
  };
  node_config cfg;
  caf::actor_system sys{cfg};
  std::vector<caf::actor> actors;
  std::vector<std::future<std::string>> started;
  std::vector<std::shared_ptr<transport::endpoint>> endpoints;
  for (size_t i = 0; i < instances.size(); ++i) {
    auto ep = std::make_shared<transport::endpoint>(cluster, instances[i].name,
                                                    transport::make_plane, incarnation);
    endpoints.push_back(ep);
    ep->set_fenced_handler(on_fenced);
    if (instances[i].joined) ep->set_join_seeds(join_seeds);
    auto done = std::make_shared<std::promise<std::string>>();
    started.push_back(done->get_future());
    actors.push_back(
        spawn_role(sys, ep, roles[i], [done](const std::string& e) { done->set_value(e); }));
  }
  int code = 0;
  for (size_t i = 0; i < started.size(); ++i)
    if (auto error = started[i].get(); !error.empty()) {
      log::logger{instances[i].name, incarnation}.error("did not start: {}", error);
      code = 1;
    }
  if (code == 0) {
    for (size_t i = 0; i < instances.size(); ++i)
      if (auto address = services::logic_of(roles[i]).public_address(); !address.empty())
        std::printf("listening %s %s\n", instances[i].name.c_str(), address.c_str());
    std::printf("ready");
    for (auto& inst : instances) std::printf(" %s", inst.name.c_str());
    std::printf("\n");
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (sig != SIGINT && !fenced) {
      drain(roles, instances, incarnation, drain_mode_of(sig, serving), stop_signals);
      // Drained: the goodbye goes out now, ahead of the sockets closing, so peers hear "left"
      // (planned) before any connection drops (a failure). The actors say it again as they end.
      for (auto& ep : endpoints) ep->announce_leave("scaled down");
    }
  }
  for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return fenced ? fenced_exit_code : code;
}

} // namespace supernode::actors
