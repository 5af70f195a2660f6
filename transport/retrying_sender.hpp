#pragma once
// Sends that wait out back-pressure without blocking the caller. A full peer queue is
// back-pressure, not a reason to lose a token or a KV block: the message is queued here, behind
// any earlier message to the same destination (so per-destination order holds), and a thread of
// its own retries with a growing pause until the deadline. Any other failure is final: the
// destination's queued messages are dropped and reported through the failure callback.
//
// Actor threads call send() and return at once; only this class's thread waits.

#include "transport/message.hpp"
#include "transport/plane.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace supernode::transport {

class retrying_sender {
public:
  using clock = std::chrono::steady_clock;
  using send_fn =
      std::function<send_status(const std::string& flow, const peer_id& to, const envelope& m)>;
  // Called on the sender's thread for every message given up on (deadline passed, or a final
  // failure such as peer_down), with the last status.
  using failure_fn = std::function<void(const std::string& flow, const peer_id& to,
                                        const envelope& m, send_status last)>;

  explicit retrying_sender(send_fn send);
  ~retrying_sender();
  retrying_sender(const retrying_sender&) = delete;
  retrying_sender& operator=(const retrying_sender&) = delete;

  void set_failure_handler(failure_fn f);
  // ok when sent or queued for retry; another status when it failed at once (nothing queued).
  send_status send(const std::string& flow, const peer_id& to, const envelope& message,
                   std::chrono::milliseconds deadline = std::chrono::milliseconds(5000));
  // Stops the thread; what is still queued is reported as failed with send_status::closed.
  void stop();

  size_t queued() const;
  uint64_t given_up() const;

private:
  struct item {
    envelope message;
    clock::time_point deadline;
  };
  struct destination {
    std::deque<item> items;
    clock::time_point next_try;
    std::chrono::microseconds pause{50};
  };
  using key = std::pair<std::string, peer_id>; // flow, peer

  void run();
  // With mutex_ held: tries the heads of every due destination; returns the failures to report.
  void retry_due(clock::time_point now, std::vector<std::pair<key, item>>& failed,
                 std::vector<send_status>& statuses);

  send_fn send_;
  failure_fn on_failure_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<key, destination> waiting_;
  uint64_t given_up_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

} // namespace supernode::transport
