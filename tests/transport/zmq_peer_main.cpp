#include "transport/checksum.hpp"
// The other process of zmq_plane_test: an echo peer on its own zmq plane.
//   zmq_peer SELF CONTROL_EP BULK_EP PARENT_ID PARENT_CONTROL_EP PARENT_BULK_EP PARENT_PID
// Announces itself with member_join, answers ping with pong and a completed bulk transfer with
// bulk_ack (FNV-1a of the bytes, in offset order), echoes any other message, and exits on
// member_leave or when the parent's connection drops.

#include "transport/control_messages.hpp"
#include "transport/zmq_plane.hpp"

#include <cstdio>
#include <cstdlib>
#include <future>
#include <map>
#include <mutex>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

using namespace supernode::transport;

namespace {

struct transfer {
  uint64_t received = 0;
  uint64_t checksum = fnv1a(nullptr, 0); // the FNV-1a offset basis
};

} // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: %s SELF CONTROL_EP BULK_EP PARENT PARENT_CONTROL PARENT_BULK PID\n",
                 argv[0]);
    return 2;
  }
  // Never outlive the test, even when it dies before reaping us.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != static_cast<pid_t>(std::atoll(argv[7]))) return 3;
  register_control_messages();

  zmq_plane_options options;
  options.self = argv[1];
  options.control_endpoint = argv[2];
  options.bulk_endpoint = argv[3];
  options.queue_bytes_limit = size_t{1} << 30;
  zmq_plane plane(options);
  const peer_id parent = argv[4];

  std::promise<void> done;
  std::once_flag done_once;
  auto finish = [&] { std::call_once(done_once, [&] { done.set_value(); }); };
  std::mutex transfers_mutex;
  std::map<uint64_t, transfer> transfers;

  plane.set_disconnect_handler([&](const peer_id& peer) {
    if (peer == parent) finish();
  });
  plane.set_handler([&](const peer_id& from, envelope message) {
    if (const auto* p = message.get<ping>()) {
      plane.send(from, make_envelope(pong{p->seq, p->sent_ns, p->payload}));
    } else if (const auto* c = message.get<bulk_chunk>()) {
      std::lock_guard lock(transfers_mutex);
      auto& t = transfers[c->transfer_id];
      t.checksum = fnv1a(c->data.data(), c->data.size(), t.checksum); // chunks arrive in order
      t.received += c->data.size();
      if (t.received >= c->total_bytes) {
        plane.send(from, make_envelope(bulk_ack{c->transfer_id, t.received, t.checksum}));
        transfers.erase(c->transfer_id);
      }
    } else if (message.is<member_leave>()) {
      finish();
    } else {
      plane.send(from, message);
    }
  });
  plane.connect(parent, argv[5], argv[6]);
  plane.start();
  member_join hello{options.self,
                    "echo",
                    static_cast<uint64_t>(getpid()),
                    {{"control", plane.control_endpoint()}, {"bulk", plane.bulk_endpoint()}}};
  plane.send(parent, make_envelope(hello));
  done.get_future().wait();
  plane.stop();
  return 0;
}
