#include "services/ems/pool_session.hpp"

#include "services/protocol/ems_messages.hpp"
#include "transport/plane_factory.hpp"

namespace supernode::services::ems {

pool_session::pool_session(const transport::cluster_config& cluster, const std::string& instance,
                           uint64_t incarnation, const ems_config& config)
    : endpoint_(cluster, instance, transport::make_plane, incarnation) {
  protocol::register_ems_messages();
  endpoint_.set_message_handler([this](const transport::peer_id&, transport::envelope m) {
    std::lock_guard lock(mutex_);
    if (auto* v = m.get<protocol::ems_ring_view>(); v && client_) client_->on_ring_view(*v);
  });
  endpoint_.start();
  {
    std::lock_guard lock(mutex_);
    client_ = std::make_unique<ems_client>(endpoint_, config);
  }
  clock_ = std::make_unique<transport::heartbeat_clock>(endpoint_);
}

pool_session::~pool_session() {
  clock_.reset();
  endpoint_.stop();
  std::lock_guard lock(mutex_);
  client_.reset();
}

} // namespace supernode::services::ems
