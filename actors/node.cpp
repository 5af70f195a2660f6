#include "actors/node.hpp"

#include "actors/role/role_actor.hpp"
#include "services/role_registry.hpp"
#include "transport/plane_factory.hpp"

#include <csignal>
#include <cstdio>
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
} // namespace

int run_node(const transport::cluster_config& cluster, const std::string& process, int index) {
  const auto instances = cluster.instances_of(process, index);
  // Block the stop signals before any thread starts, so only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  node_config cfg;
  caf::actor_system sys{cfg};
  std::vector<role_actor> actors;
  // A new incarnation per process start: peers tell a restarted instance from the old one.
  const uint64_t incarnation =
      (static_cast<uint64_t>(::getpid()) << 32) ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  for (auto& inst : instances) {
    auto logic = std::shared_ptr<services::role_logic>(services::make_role_logic(inst.role));
    auto ep = std::make_shared<transport::endpoint>(cluster, inst.name, transport::make_plane,
                                                    incarnation);
    actors.push_back(sys.spawn(role_behavior, ep, logic));
  }
  std::printf("ready");
  for (auto& inst : instances) std::printf(" %s", inst.name.c_str());
  std::printf("\n");
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  return 0;
}

} // namespace supernode::actors
