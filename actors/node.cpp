#include "actors/node.hpp"

#include "actors/protocol/type_ids.hpp"
#include "actors/role/role_actor.hpp"
#include "kernels/thread_pool.hpp"
#include "services/cluster/join_policy.hpp"
#include "services/ems/model_fetch.hpp"
#include "services/role_registry.hpp"
#include "services/serving/model_store.hpp"
#include "services/serving/role_switch.hpp"
#include "transport/instance_claim.hpp"
#include "transport/plane_factory.hpp"

#include <algorithm>
#include <atomic>
#include <caf/scoped_actor.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <future>
#include <sched.h>
#include <sstream>
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
  return serving.decode_drain; // SIGTERM, or a role switch
}

// The role instances a node runs now, their endpoints and actors, and the name claim of a
// joined instance (held while it runs).
struct hosting {
  transport::cluster_config cluster; // with the joined instance, if any
  std::unique_ptr<transport::instance_claim> claim;
  std::vector<transport::instance_config> instances;
  std::vector<services::role_instance> roles;
  std::vector<std::shared_ptr<transport::endpoint>> endpoints;
  std::vector<caf::actor> actors;

  std::string names() const {
    std::string out;
    for (auto& i : instances) out += (out.empty() ? "" : " ") + i.name;
    return out;
  }
};

// What a node needs to start instances, the same for each it hosts in its life.
struct node_context {
  caf::actor_system& system;
  const services::serving_config& serving;
  uint64_t incarnation;
  transport::endpoint::fenced_handler on_fenced;
};

// A joined instance of `role`, its name claimed now.
std::unique_ptr<hosting> joined_hosting(const transport::cluster_config& cluster,
                                        const std::string& role) {
  auto h = std::make_unique<hosting>();
  h->cluster = cluster;
  h->claim = std::make_unique<transport::instance_claim>(cluster, role);
  const auto kind = services::cluster::kind_serving(cluster, role);
  h->instances = {h->cluster.add_joined_instance(kind, role, h->claim->role_index())};
  return h;
}

// Makes the instances' logic and starts their actors; 0 once every one runs, 1 when one could
// not start (its reason logged). Prints their "listening" lines and the "ready" line.
int start_hosting(const node_context& node, hosting& h,
                  const std::vector<transport::endpoint::join_seed>& seeds) {
  try {
    for (auto& inst : h.instances)
      h.roles.push_back(services::make_role(
          {inst, h.cluster, node.serving, log::logger{inst.name, node.incarnation}}));
  } catch (const std::exception& e) {
    log::logger{h.names(), node.incarnation}.error("did not start: {}", e.what());
    return 1;
  }
  std::vector<std::future<std::string>> started;
  for (size_t i = 0; i < h.instances.size(); ++i) {
    auto ep = std::make_shared<transport::endpoint>(h.cluster, h.instances[i].name,
                                                    transport::make_plane, node.incarnation);
    h.endpoints.push_back(ep);
    ep->set_fenced_handler(node.on_fenced);
    if (h.instances[i].joined) ep->set_join_seeds(seeds);
    auto done = std::make_shared<std::promise<std::string>>();
    started.push_back(done->get_future());
    h.actors.push_back(spawn_role(node.system, ep, h.roles[i],
                                  [done](const std::string& e) { done->set_value(e); }));
  }
  int code = 0;
  for (size_t i = 0; i < started.size(); ++i)
    if (auto error = started[i].get(); !error.empty()) {
      log::logger{h.instances[i].name, node.incarnation}.error("did not start: {}", error);
      code = 1;
    }
  if (code != 0) return code;
  for (size_t i = 0; i < h.instances.size(); ++i)
    if (auto address = services::logic_of(h.roles[i]).public_address(); !address.empty())
      std::printf("listening %s %s\n", h.instances[i].name.c_str(), address.c_str());
  std::printf("ready %s\n", h.names().c_str());
  std::fflush(stdout);
  return 0;
}

// Ends the instances' actors and waits until they are gone (their planes' sockets closed), then
// lets their logic go.
void stop_hosting(caf::actor_system& system, hosting& h) {
  caf::scoped_actor self{system};
  for (auto& a : h.actors) self->send_exit(a, caf::exit_reason::user_shutdown);
  self->wait_for(h.actors);
  h.actors.clear();
  h.endpoints.clear();
  h.roles.clear();
}

// Drains every instance and returns 0 once all are drained, or, at once, the stop or drain
// signal that came meanwhile (SIGINT, or the supervisor's patience ending in SIGKILL anyway). A
// role switch asked for meanwhile is ignored: the instance is leaving.
int drain(const hosting& h, uint64_t incarnation, services::drain_mode mode,
          const sigset_t& stop_signals) {
  for (size_t i = 0; i < h.roles.size(); ++i) {
    log::logger{h.instances[i].name, incarnation}.info("draining ({})", services::to_string(mode));
    services::logic_of(h.roles[i]).drain(mode);
  }
  auto all_drained = [&] {
    return std::all_of(h.roles.begin(), h.roles.end(),
                       [](auto& r) { return services::logic_of(r).drained(); });
  };
  // The instances drain on their own threads; this thread only looks every 20 ms, and a signal
  // ends the wait sooner.
  const timespec look_again{0, 20'000'000};
  while (!all_drained())
    if (int sig = sigtimedwait(&stop_signals, nullptr, &look_again);
        sig > 0 && services::role_switch_target(sig).empty())
      return sig;
  return 0;
}

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t).count();
}

} // namespace

std::vector<transport::endpoint::join_seed> parse_join_seeds(const std::string& text,
                                                             const transport::cluster_config& c) {
  std::vector<transport::endpoint::join_seed> seeds;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (item.empty()) continue;
    const auto at = item.find('@');
    transport::endpoint::join_seed seed{item.substr(0, at),
                                        at == std::string::npos ? "" : item.substr(at + 1)};
    if (seed.control_address.empty()) c.instance(seed.peer); // throws naming it
    seeds.push_back(std::move(seed));
  }
  if (seeds.empty())
    throw std::runtime_error("no member to join through (expected NAME[@ADDRESS],...)");
  return seeds;
}

int run_node(const transport::cluster_config& cluster, const services::serving_config& serving,
             const std::string& process, int index, std::optional<node_join> join) {
  for (auto& p : cluster.processes)
    if (p.name == process) apply_placement(p);
  // Block the stop, drain and switch signals before any thread starts, so only this thread
  // sees them.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, services::drain_finish_signal, services::drain_migrate_signal,
                  services::switch_to_prefill_signal(), services::switch_to_decode_signal()})
    sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // One incarnation per process start: peers tell a restarted instance from the old one.
  const uint64_t incarnation = transport::new_incarnation();
  // Logic first: loading a model or binding a port may fail, and should before any actor runs.
  std::unique_ptr<hosting> hosted;
  if (join) {
    hosted = joined_hosting(cluster, join->role);
  } else {
    hosted = std::make_unique<hosting>();
    hosted->cluster = cluster;
    hosted->instances = cluster.instances_of(process, index);
  }
  // With the model cache, the model comes through the pool into a local copy first.
  services::serving_config effective = serving;
  if (serving.ems.model_cache && !hosted->instances.empty() && needs_model(hosted->instances)) {
    auto fetched = services::ems::fetch_model_through_pool(
        cluster, serving, hosted->instances.front().name, incarnation);
    effective.model_name = serving.model_id();
    effective.model_path = fetched.dir;
  }
  const std::string own_role = hosted->instances.size() == 1 ? hosted->instances.front().role : "";
  auto switchable = [&](const std::string& role) {
    return services::cluster::switch_refusal(cluster, serving.decode_ranks, serving.prefill_ranks,
                                             process, role);
  };
  // A process that may switch roles keeps its model copy for its whole life: the instance it
  // switches to takes the same weights (model_store's cache) instead of loading them again.
  std::shared_ptr<const model::model_weights> kept_weights;
  if ((own_role == "prefill" || own_role == "decode") &&
      switchable(own_role == "prefill" ? "decode" : "prefill").empty())
    kept_weights = services::shared_weights(effective.model_path, effective.precision,
                                            effective.kv_with_mtp());

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
  const node_context node{sys, effective, incarnation, on_fenced};
  int code = start_hosting(node, *hosted,
                           join ? join->seeds : std::vector<transport::endpoint::join_seed>{});
  while (code == 0) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (fenced) break;
    const auto to_role = services::role_switch_target(sig);
    if (to_role.empty()) {
      if (sig != SIGINT && drain(*hosted, incarnation, drain_mode_of(sig, serving), signals) == 0) {
        // Drained: the goodbye goes out now, ahead of the sockets closing, so peers hear "left"
        // (planned) before any connection drops (a failure). The actors say it again as they end.
        for (auto& ep : hosted->endpoints) ep->announce_leave("scaled down");
      }
      break;
    }
    const log::logger log{hosted->names(), incarnation};
    if (auto why = switchable(to_role); !why.empty() || !kept_weights) {
      log.error("cannot switch to {}: {}", to_role,
                why.empty() ? "this process does not serve one prefill or decode instance" : why);
      continue;
    }
    if (hosted->instances.front().role == to_role) {
      log.info("already serves {}; nothing to switch", to_role);
      std::printf("ready %s\n", hosted->names().c_str());
      std::fflush(stdout);
      continue;
    }
    // The switch: drained as for a scale-down, gone from the cluster, then the other role's
    // instance under a joined name, on the same model copy.
    const auto began = clock_type::now();
    // A stop signal while draining for a switch ends the process, as it would have anyway.
    if (drain(*hosted, incarnation, drain_mode_of(SIGTERM, serving), signals) != 0) break;
    const double drained_ms = ms_since(began);
    for (auto& ep : hosted->endpoints) ep->announce_leave("switched to " + to_role);
    stop_hosting(sys, *hosted);
    const auto from = hosted->names();
    std::vector<transport::endpoint::join_seed> seeds;
    try {
      // Joined as at the start, or through the config's schedulers and gateways.
      seeds = join ? join->seeds
                   : parse_join_seeds(services::cluster::default_join_seeds(cluster), cluster);
      hosted = joined_hosting(cluster, to_role);
    } catch (const std::exception& e) {
      log.error("cannot switch to {}: {}", to_role, e.what());
      code = 1;
      break;
    }
    code = start_hosting(node, *hosted, seeds);
    if (code == 0)
      log::logger{hosted->names(), incarnation}.info(
          "switched from {} to {} in {:.0f} ms ({:.0f} ms of it draining)", from, hosted->names(),
          ms_since(began), drained_ms);
  }
  for (auto& a : hosted->actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return fenced ? fenced_exit_code : code;
}

} // namespace supernode::actors
