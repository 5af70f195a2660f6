#pragma once
// The shm plane: the UB stand-in between processes on one host. Each peer owns an inbox
// segment "/supernode.<cluster>.inbox.<peer>" holding a doorbell its receiving thread sleeps on
// and a table of slots naming its inbound rings. A sender creates (and owns) one SPSC ring per
// receiver, "/supernode.<cluster>.ring.<to>.<from>", the first time it sends there, and claims a
// slot for it in the receiver's inbox. Sender-created rings mean a receiver needs no list of its
// senders in advance, a sender learns at once whether its peer exists (no inbox: unknown_peer),
// and one futex per receiver covers any number of inbound rings.
//
// Frames: a message is encoded with its large shared_bytes bodies referenced, not copied
// (envelope::encode_spliced), and the pieces are gathered straight into the ring: one copy on the
// sending side. A frame that fits in half the ring (ring_bytes/2, 4 MiB by default) goes into one
// record and is decoded in place from the ring (its bodies are copied out: ring space is reused).
// Larger frames, up to max_frame_bytes (64 MiB bulk_chunk included), are queued by reference (the
// message's bodies are shared, not copied) and split into fragment_bytes pieces that a writer
// thread streams into the ring as the receiver drains it; the receiver reassembles each into a
// buffer of its own, which the decoded message then references (no second copy). Buffers return
// to a small pool when the last message using them is gone, so steady traffic reuses warm pages.
// So send() never blocks: it either copies into the ring, or queues a big frame (bounded by
// outbound_limit_bytes), or answers queue_full.
//
// Identity: a ring's name and slot only claim who sent it. With the cluster's keys, the creator
// proves the claim: its ring header carries a MAC (shm_link_auth) over the receiver's inbox nonce,
// the slot's one-time challenge and who it is, keyed by the shared secret of its key pair and the
// receiver's. The receiver verifies it before reading a record; a ring that fails is never read,
// counted (identity_mismatch), logged (rate-limited) and its slot freed with a fresh challenge.
// Segments of another user are never opened at all.
//
// Healing: a receiver that stops reading a ring (scribbled records, a failed proof) frees its slot
// and bumps the slot's generation. The sender sees that on its next send and connects again with
// a fresh ring, which the receiver accepts like any first connection: one bad link never makes a
// live peer unreachable. (Frames that fail to decode are only counted; the ring stays.)
//
// Liveness: ring and inbox headers carry the creator's pid and start time. The receiving thread
// checks its senders and receivers every liveness_interval (also while waiting), and a full ring
// checks its receiver at once; a dead or cleanly closed peer is reported once through the
// disconnect handler, its partial frame is dropped and the segments it can no longer remove are
// unlinked. The handler runs on the receiving thread or inside send().

#include "transport/cluster_keys.hpp"
#include "transport/plane.hpp"
#include "transport/shm_link_auth.hpp"
#include "transport/shm_ring.hpp"
#include "transport/shm_segment.hpp"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <vector>

namespace supernode::transport {

struct shm_plane_options {
  size_t ring_bytes = 8u << 20;                       // per ordered pair of peers
  size_t max_frame_bytes = (64u << 20) + (64u << 10); // a 64 MiB bulk_chunk plus its framing
  size_t fragment_bytes = 1u << 20;                   // pieces of frames that exceed one record
  size_t outbound_limit_bytes = 256u << 20;           // queued big frames per peer
  std::chrono::microseconds spin{50};                 // busy-wait before sleeping on the futex
  std::chrono::milliseconds liveness_interval{100};
  // The cluster's key pairs: rings are signed and verified with them. Null: unauthenticated
  // (unit tests and benches only; a receiver without keys believes any ring's claim).
  std::shared_ptr<const cluster_keys> keys;
};

using disconnect_handler = std::function<void(const peer_id&)>;

class shm_plane : public plane {
public:
  // Removes the cluster's stale segments, then creates this peer's inbox (shm_error when a live
  // process already owns `self` in `cluster`). Peers may send to it before start().
  shm_plane(std::string cluster, peer_id self, shm_plane_options options = {});
  ~shm_plane() override;

  std::string_view kind() const override { return "shm"; }
  send_status send(const peer_id& to, const envelope& message) override;
  // Sends bytes that are already a frame, unchecked: the receiver validates. For forwarding
  // and for tests that need to put a bad frame on the wire.
  send_status send_frame(const peer_id& to, std::span<const std::byte> frame);
  void set_handler(message_handler handler) override;
  void set_disconnect_handler(disconnect_handler handler);
  bool link_down(const peer_id& peer) const override;
  // Test-only: makes the ring to `to` unreadable (a record header pointing past its end), as a
  // scribbling sender would.
  send_status corrupt_ring_for_test(const peer_id& to);
  // Test-only: sends `message` to `to` over a ring of its own that claims to come from `from`,
  // signed with this plane's key: what a peer speaking for another would do.
  send_status send_claiming_for_test(const peer_id& from, const peer_id& to,
                                     const envelope& message);
  void start() override;
  void stop() override;

  const std::string& cluster() const { return cluster_; }
  const peer_id& self() const { return self_; }

private:
  struct inbox_control;
  struct outbound;
  struct inbound;
  class buffer_pool;

  using pieces_view = std::span<const std::span<const std::byte>>;
  send_status send_pieces(const peer_id& to, pieces_view pieces, encoded_frame* owned);
  std::shared_ptr<outbound> connection(const peer_id& to, send_status& status);
  // A fresh ring to `to` claiming to come from `from` (always self_, but for the test hook).
  std::shared_ptr<outbound> connect(const peer_id& to, send_status& status, const peer_id& from);
  bool receiver_alive(const outbound& o) const;
  // The receiver freed our slot (it stopped reading the ring): connect again, the peer lives.
  bool link_dropped(const outbound& o) const;
  // Retires `o` when its link was dropped (true), with o.mutex held; false when it was not.
  bool retire_dropped_locked(outbound& o);
  bool retire_dropped(outbound& o);
  // Signs the ring of `o` for the slot just claimed; false (why says) when it cannot.
  bool sign_ring(outbound& o, const inbox_control& inbox, uint32_t slot, const peer_id& from,
                 const std::string& ring, std::string& why);
  // Whether the ring `in` reads proves it was made by in.from for this slot.
  bool ring_proven(inbound& in, const std::string& ring, std::string& why);
  // Frees an inbox slot (receiver only): a fresh challenge, the next generation.
  void free_slot(uint32_t index);
  void drop_unreadable_rings();
  bool close_outbound(outbound& o);
  void mark_down(outbound& o);
  void report_down(const peer_id& peer);
  void receive_loop();
  void scan_slots();
  bool drain(inbound& in, const message_handler& handler, size_t budget);
  std::optional<envelope> take_record(inbound& in, const ring_record& r);
  void bad_frame(inbound& in, frame_error e, const std::string& why);
  // Counts a bad frame from `in` and logs it, rate-limited per sender.
  void report_bad_frame(inbound& in, const std::string& why);
  void remove_inbound(size_t index, bool unlink_ring);
  void sweep();
  void write_loop();
  void ensure_writer();
  bool flush(outbound& o, bool& still_pending);

  std::string cluster_;
  peer_id self_;
  shm_plane_options options_;
  std::unique_ptr<shm_link_auth> auth_; // null: unauthenticated
  shm_segment inbox_segment_;
  inbox_control* inbox_ = nullptr;
  // Our copies of what we wrote into the inbox: a sender can overwrite the shared ones.
  link_nonce inbox_nonce_{};
  std::vector<link_nonce> slot_challenges_; // by slot; receiving thread only after start

  std::mutex out_mutex_;
  std::map<peer_id, std::shared_ptr<outbound>> out_;
  std::vector<std::shared_ptr<outbound>> claimed_for_test_;
  std::vector<std::unique_ptr<inbound>> in_; // receiving thread only
  std::shared_ptr<buffer_pool> reassembly_pool_;

  mutable std::mutex handler_mutex_;
  message_handler handler_;
  std::atomic<uint32_t> handler_generation_{0};
  disconnect_handler disconnect_handler_;
  std::set<peer_id> reported_down_;

  std::mutex writer_mutex_;
  std::condition_variable writer_wake_;
  bool writer_kicked_ = false;

  std::mutex lifecycle_mutex_;
  std::atomic<bool> stopping_{false};
  bool started_ = false, stopped_ = false;
  std::thread receiver_, writer_;
};

} // namespace supernode::transport
