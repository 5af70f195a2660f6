#pragma once
// A role hosted without an actor system, for tests of one role's logic over the inproc plane:
// the endpoint's handlers call the service one at a time (under a lock, as its actor would),
// messages go through services::dispatch (the same interface check the typed actor makes), and
// a heartbeat clock ticks the endpoint and the service. Construct with a started-later service;
// the host starts it and stops it.

#include "services/role_interface.hpp"
#include "transport/endpoint.hpp"
#include "transport/heartbeat_clock.hpp"
#include "transport/plane_factory.hpp"

#include <memory>
#include <mutex>
#include <string>

namespace supernode::testing {

template<services::typed_role Service>
class role_host {
public:
  role_host(const transport::cluster_config& cluster, const std::string& name,
            std::shared_ptr<Service> service, uint64_t incarnation = 3)
      : service_(std::move(service)), ep_(cluster, name, transport::make_plane, incarnation) {
    ep_.set_message_handler([this](const transport::peer_id& from, transport::envelope m) {
      std::lock_guard lock(mutex_);
      if (!services::dispatch(*service_, from, m, ep_))
        ep_.count_unexpected(from, m.type(), Service::interface::role);
    });
    ep_.set_event_handler([this](const transport::membership_event& e) {
      std::lock_guard lock(mutex_);
      service_->on_member_event(e, ep_);
    });
    ep_.start();
    service_->start(ep_);
    clock_ = std::make_unique<transport::heartbeat_clock>(ep_, [this] {
      std::lock_guard lock(mutex_);
      service_->on_tick(ep_);
    });
  }
  ~role_host() {
    clock_.reset();
    service_->stop();
    ep_.stop();
  }
  role_host(const role_host&) = delete;
  role_host& operator=(const role_host&) = delete;

  Service& service() { return *service_; }
  transport::endpoint& endpoint() { return ep_; }
  // Runs `fn` as a handler would: alone with the service.
  template<class Fn>
  auto locked(Fn&& fn) {
    std::lock_guard lock(mutex_);
    return fn(*service_);
  }

private:
  std::shared_ptr<Service> service_;
  transport::endpoint ep_;
  std::mutex mutex_;
  std::unique_ptr<transport::heartbeat_clock> clock_;
};

} // namespace supernode::testing
