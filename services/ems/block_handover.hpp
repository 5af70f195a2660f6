#pragma once
// What one MP server hands over when the ring changes (issue 15): the controller sends the ring
// it will publish next (the target), and every block this server owns now whose owners under
// the target include a server that is not an owner now goes to that server. Blocks leave in
// batches of bounded bytes, a few batches in flight, so the storage thread keeps serving reads
// between them; a put that lands here during the change is planned again (its newer value goes
// too). Not thread-safe: the server's storage thread owns it.

#include "services/ems/block_store.hpp"
#include "services/ems/hash_ring.hpp"
#include "services/protocol/ems_messages.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace supernode::services::ems {

// The servers `self` must give (ns, key) to when the ring goes from `current` to `target` with
// `copies` owners per key: none unless `self` owns the key now, else the target's owners that
// are neither `self` nor owners now.
std::vector<std::string> handover_destinations(const hash_ring& current, const hash_ring& target,
                                               size_t copies, const std::string& self,
                                               std::string_view ns, std::string_view key);

// A hash ring over `servers` (the ring sorts them).
hash_ring ring_of(int32_t vnodes, const std::vector<std::string>& servers);

struct handover_batch {
  std::string to;
  protocol::ems_put put; // request_id left for the sender
  uint64_t planned = 0;  // of its blocks, those the change planned at its start
};

struct handover_totals {
  uint64_t blocks_out = 0;    // acknowledged by their new owner
  uint64_t blocks_failed = 0; // refused, unanswered, or left when the change ended
  uint64_t blocks_in = 0;     // received from other servers' hand-overs
};

class block_handover {
public:
  static constexpr size_t default_batch_bytes = size_t{4} << 20;
  static constexpr size_t max_batch_blocks = 256;
  static constexpr int max_batches_in_flight = 2;

  // A batch ends past `batch_bytes` of block data (a block larger than that goes alone).
  explicit block_handover(std::string self, size_t batch_bytes = default_batch_bytes)
      : self_(std::move(self)), batch_bytes_(batch_bytes) {}

  // Plans the change `target` over every block `store` holds. A change that was still running
  // is replaced: the new plan covers its unsent blocks again (against the new target), and
  // blocks it still had queued go to their owners under the new target even where this
  // server does not own them now (a put that landed here during the last change).
  void begin(const protocol::ems_ring_target& target, const block_store& store);
  // The newest ring this server knows: a change's target, or a ring the controller published.
  // A version it has or an older one is ignored (a resend, or one overtaken by a newer ring).
  void learn_ring(uint64_t version, int32_t vnodes, int32_t copies,
                  const std::vector<std::string>& servers);
  // A block a client stored here. It goes on when a running change moves it, and also when
  // this server is no owner of it on the newest ring and no change moves it: the put of a
  // client with an older ring that crossed the publish. True for that stray: nothing else
  // would ever take it to its owners, so its acknowledgement waits until they have it.
  bool note_client_put(const std::string& ns, const std::string& key);
  // A block another server handed over here: it goes on only when a running change moves it
  // (the sender's ring may be newer than any this server has learnt yet).
  void note_put(const std::string& ns, const std::string& key);
  // The next batch to send, read from `store`, when a change runs, has blocks left and fewer
  // than max_batches_in_flight batches wait for their answers. Blocks gone meanwhile are
  // skipped.
  std::optional<handover_batch> next_batch(block_store& store);
  // The answer to a batch of change `version` (`planned`: its handover_batch::planned):
  // `stored` blocks taken, `failed` not; `unreachable` when no answer came at all (the owner
  // down, or not known to be up yet), not a refusal.
  void answered(uint64_t version, uint64_t planned, uint64_t stored, uint64_t failed,
                bool unreachable = false);
  // Once per change: true when the last block it planned at its start was answered (the
  // caller reports done). Blocks put during the change go on being forwarded meanwhile, but a
  // steady put load must not keep the change from ending.
  bool take_finished();
  // The controller published ring `published_version`: a change at or below it is over for
  // the controller. What it still has queued or unanswered (puts that landed during the
  // change, or blocks a timed-out change had not sent) goes on to their owners, and the change
  // closes once idle: a block this server acknowledged is never dropped while it lives. The
  // count still to go.
  uint64_t end(uint64_t published_version);
  // For a server the published ring `servers` no longer has, until it exits: blocks still
  // queued, and blocks put here by clients that had the older ring, go to their owners on it.
  void forward_to(uint64_t version, int32_t vnodes, int32_t copies,
                  const std::vector<std::string>& servers);
  // Nothing queued and no batch unanswered.
  bool idle() const { return !change_ || (change_->in_flight == 0 && queued() == 0); }

  void count_received(uint64_t blocks) { totals_.blocks_in += blocks; }
  bool active() const { return change_.has_value(); }
  // The running change was reported finished (take_finished answered true once).
  bool finished_reported() const { return change_ && change_->reported && !change_->published; }
  uint64_t version() const { return change_ ? change_->target.version : 0; }
  // Blocks this change has planned, acknowledged and failed so far, and how long it has run.
  uint64_t planned() const { return change_ ? change_->planned : 0; }
  uint64_t change_sent() const { return change_ ? change_->sent : 0; }
  uint64_t change_failed() const { return change_ ? change_->failed : 0; }
  uint64_t change_unreachable() const { return change_ ? change_->unreachable : 0; }
  std::chrono::milliseconds elapsed() const;
  const handover_totals& totals() const { return totals_; }

private:
  struct change {
    protocol::ems_ring_target target;
    hash_ring current, next;
    // (destination, ns) -> keys to send, in plan order, each marked when planned at the start.
    std::map<std::pair<std::string, std::string>, std::deque<std::pair<std::string, bool>>> queue;
    uint64_t planned = 0, sent = 0, failed = 0, unreachable = 0;
    uint64_t initial_left = 0; // planned at the start and not answered yet
    int in_flight = 0;
    bool reported = false;
    bool published = false; // the controller is past it: closes once idle
    std::chrono::steady_clock::time_point started;
  };
  // Queues the key to the servers the change gives it to; true when there are any.
  bool plan(const std::string& ns, const std::string& key, bool initial);
  void queue_to(const std::string& to, const std::string& ns, const std::string& key, bool initial);
  uint64_t queued() const;
  void close_if_done(); // a published change with nothing left
  // A change the controller does not wait for, from the ring over `from` to the one over
  // `servers`: open until the process exits, or (`published`) until idle.
  void open_forwarding(uint64_t version, int32_t vnodes, int32_t copies,
                       const std::vector<std::string>& from,
                       const std::vector<std::string>& servers, bool published);

  struct known_ring {
    uint64_t version = 0;
    size_t copies = 1;
    hash_ring ring;
  };

  std::string self_;
  size_t batch_bytes_;
  std::optional<change> change_;
  std::optional<known_ring> newest_;
  handover_totals totals_;
};

} // namespace supernode::services::ems
