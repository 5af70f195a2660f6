#pragma once
// The inproc plane: roles in one process hand each other the message object itself (a
// shared_ptr), with no copy and no encoding. A hub maps peer ids to their receiving planes;
// each plane delivers on its own thread from a bounded queue, like the byte planes do.

#include "transport/plane.hpp"

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace supernode::transport {

class inproc_plane;

class inproc_hub {
public:
  // Shared by every inproc plane of the process.
  static std::shared_ptr<inproc_hub> create() { return std::make_shared<inproc_hub>(); }
  void attach(const peer_id& id, inproc_plane* plane);
  void detach(const peer_id& id, inproc_plane* plane);
  inproc_plane* find(const peer_id& id);
  std::mutex& mutex() { return mutex_; }

private:
  std::mutex mutex_;
  std::map<peer_id, inproc_plane*> planes_;
};

class inproc_plane : public plane {
public:
  inproc_plane(std::shared_ptr<inproc_hub> hub, peer_id self, size_t queue_limit = 4096);
  ~inproc_plane() override;

  std::string_view kind() const override { return "inproc"; }
  send_status send(const peer_id& to, const envelope& message) override;
  void set_handler(message_handler handler) override;
  void start() override;
  void stop() override;

private:
  friend class inproc_hub;
  send_status enqueue(const peer_id& from, const envelope& message);
  void run();

  std::shared_ptr<inproc_hub> hub_;
  peer_id self_;
  size_t queue_limit_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::pair<peer_id, envelope>> queue_;
  message_handler handler_;
  bool running_ = false, stopping_ = false;
  std::thread thread_;
};

} // namespace supernode::transport
