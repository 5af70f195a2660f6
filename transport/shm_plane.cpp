#include "transport/shm_plane.hpp"

#include "transport/shm_sync.hpp"

#include <cstring>
#include <deque>
#include <unistd.h>

namespace supernode::transport {

namespace {

constexpr uint64_t inbox_magic = 0x58424E49444F4E53ull; // "SNODINBX"
constexpr uint32_t inbox_slot_count = 256;

// Ring record tags: a frame in one record, or the pieces of one too big for a record.
enum record_tag : uint32_t { whole = 0, first_piece = 1, middle_piece = 2, last_piece = 3 };

// An inbox slot's life: a sender claims a free slot (CAS), fills it and marks it ready; it marks
// it closed on a clean stop; only the receiver frees it again, so a slot the receiver is reading
// from is never reused under it.
enum slot_state : uint32_t { slot_free = 0, slot_claiming = 1, slot_ready = 2, slot_closed = 3 };

struct alignas(64) inbox_slot {
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> generation; // bumped whenever the receiver frees the slot
  std::atomic<int32_t> claimer_pid;
  std::atomic<uint64_t> claimer_start;
  std::byte challenge[link_nonce_bytes]; // the receiver's, fresh per free: the ring MAC covers it
  char sender[72];
  char ring[200]; // segment name of the sender's ring, after "/supernode.<cluster>."
};

// Unique per connection: a ring of an earlier connection to the same peer may still be mapped
// (and named) while a new one is created after the peer restarted.
std::string ring_name(const peer_id& to, const peer_id& from) {
  static std::atomic<uint64_t> next{0};
  return "ring." + to + "." + from + "." + std::to_string(getpid()) + "." +
         std::to_string(next.fetch_add(1));
}

// Reads a NUL-terminated name the other process wrote, never past the field.
template<size_t N>
std::string field(const char (&f)[N]) {
  char copy[N + 1] = {};
  std::memcpy(copy, f, N);
  return copy;
}

} // namespace

struct shm_plane::inbox_control {
  uint64_t magic;
  uint32_t slot_count;
  std::byte nonce[link_nonce_bytes];   // this incarnation of the receiver: the ring MAC covers it
  alignas(64) doorbell bell;           // the receiving thread sleeps here
  std::atomic<uint32_t> slots_changed; // bumped on claim/close: rescan the slots
  alignas(64) inbox_slot slots[inbox_slot_count];
};

struct shm_plane::outbound {
  peer_id id;
  shm_segment inbox_segment;
  inbox_control* inbox = nullptr;
  uint32_t slot = 0, slot_generation = 0;
  shm_ring ring;
  std::mutex mutex; // one producer per ring: senders of this process take turns
  struct queued {
    encoded_frame frame; // owns the head and shares the bodies the pieces point into
    std::vector<std::span<const std::byte>> pieces;
    size_t size = 0;
  };
  std::deque<queued> pending;
  size_t pending_bytes = 0, front_offset = 0;
  std::atomic<bool> down{false};
};

struct shm_plane::inbound {
  uint32_t slot = 0;
  peer_id from;
  shm_ring ring;
  std::shared_ptr<std::byte[]> assembly; // a fresh one per frame: the message may keep it
  size_t assembled = 0, expected = 0;
  bool assembling = false, discarding = false;
  bool unreadable = false; // scribbled: dropped after this drain round
  uint64_t bad_frames = 0;
};

// Whole records at least this large are copied out of the ring into a pooled buffer.
constexpr size_t pooled_record_bytes = size_t{256} << 10;

// Reassembly buffers. A decoded message may reference its buffer for as long as a handler keeps
// it, so a buffer is never reused under a message: it comes back here when the last reference
// goes. Faulting in fresh pages for every 64 MiB frame would cost about as much as the copy the
// reference saves. The pool may die before the messages (the plane stopped): they free their
// buffers themselves then.
class shm_plane::buffer_pool : public std::enable_shared_from_this<buffer_pool> {
public:
  static constexpr size_t max_kept = 4;

  std::shared_ptr<std::byte[]> take(size_t bytes) {
    std::byte* block = nullptr;
    size_t capacity = 0;
    {
      std::lock_guard lock(mutex_);
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;
      if (best != free_.end()) {
        block = best->first;
        capacity = best->second;
        free_.erase(best);
      }
    }
    if (!block) {
      block = new std::byte[bytes]; // not value-initialised: every byte is written before use
      capacity = bytes;
    }
    return std::shared_ptr<std::byte[]>(block, [pool = weak_from_this(), capacity](std::byte* b) {
      if (auto p = pool.lock())
        p->give_back(b, capacity);
      else
        delete[] b;
    });
  }

  ~buffer_pool() {
    for (auto& [block, capacity] : free_) delete[] block;
  }

private:
  void give_back(std::byte* block, size_t capacity) {
    {
      std::lock_guard lock(mutex_);
      if (free_.size() < max_kept) {
        free_.emplace_back(block, capacity);
        return;
      }
    }
    delete[] block;
  }

  std::mutex mutex_;
  std::vector<std::pair<std::byte*, size_t>> free_;
};

shm_plane::shm_plane(std::string cluster, peer_id self, shm_plane_options options)
    : cluster_(std::move(cluster)), self_(std::move(self)), options_(options),
      reassembly_pool_(std::make_shared<buffer_pool>()) {
  log_ = log::logger{self_};
  check_name_part("cluster", cluster_);
  check_name_part("peer", self_);
  options_.fragment_bytes = std::max<size_t>(4096, options_.fragment_bytes);
  // Our secret first: a missing key fails before anything is created.
  if (options_.keys) auth_ = std::make_unique<shm_link_auth>(options_.keys, self_);
  cleanup_stale_segments(cluster_);
  inbox_segment_ =
      shm_segment::create(cluster_, "inbox." + self_, segment_kind::inbox, sizeof(inbox_control));
  inbox_ = new (inbox_segment_.data()) inbox_control{};
  inbox_->slot_count = inbox_slot_count;
  inbox_nonce_ = random_link_nonce();
  std::memcpy(inbox_->nonce, inbox_nonce_.data(), inbox_nonce_.size());
  slot_challenges_.resize(inbox_slot_count);
  for (uint32_t i = 0; i < inbox_slot_count; ++i) {
    slot_challenges_[i] = random_link_nonce();
    std::memcpy(inbox_->slots[i].challenge, slot_challenges_[i].data(), link_nonce_bytes);
  }
  std::atomic_thread_fence(std::memory_order_release);
  inbox_->magic = inbox_magic;
}

shm_plane::~shm_plane() {
  stop();
}

void shm_plane::set_handler(message_handler handler) {
  {
    std::lock_guard lock(handler_mutex_);
    handler_ = std::move(handler);
  }
  handler_generation_.fetch_add(1, std::memory_order_release);
  if (inbox_) inbox_->bell.ring();
}

void shm_plane::set_disconnect_handler(disconnect_handler handler) {
  std::lock_guard lock(handler_mutex_);
  disconnect_handler_ = std::move(handler);
}

void shm_plane::start() {
  std::lock_guard lock(lifecycle_mutex_);
  if (started_ || stopped_) return;
  started_ = true;
  receiver_ = std::thread([this] { receive_loop(); });
  if (!writer_.joinable()) writer_ = std::thread([this] { write_loop(); });
}

// Senders may queue big frames before start(); they go out as soon as they are queued.
void shm_plane::ensure_writer() {
  std::lock_guard lock(lifecycle_mutex_);
  if (!stopped_ && !writer_.joinable()) writer_ = std::thread([this] { write_loop(); });
}

void shm_plane::stop() {
  {
    std::lock_guard lock(lifecycle_mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  stopping_.store(true);
  inbox_->bell.ring();
  {
    std::lock_guard lock(writer_mutex_);
    writer_kicked_ = true;
  }
  writer_wake_.notify_all();
  if (receiver_.joinable()) receiver_.join();
  if (writer_.joinable()) writer_.join();
  // Tell our receivers we left cleanly, then drop our rings (we created them, so we unlink).
  std::map<peer_id, std::shared_ptr<outbound>> out;
  {
    std::lock_guard lock(out_mutex_);
    out.swap(out_);
  }
  for (auto& [id, o] : out) close_outbound(*o);
  out.clear();
  for (auto& o : claimed_for_test_) close_outbound(*o);
  claimed_for_test_.clear();
  in_.clear();
  inbox_segment_.mark_closed();
  inbox_->bell.ring();
  inbox_segment_ = shm_segment(); // unlinks the inbox
  // Segments of peers that died without cleaning up (SIGKILL) go too, so a stopped cluster
  // leaves nothing in /dev/shm even when some of its processes crashed.
  cleanup_stale_segments(cluster_);
  inbox_ = nullptr;
}

bool shm_plane::link_down(const peer_id& peer) const {
  std::lock_guard lock(handler_mutex_);
  return reported_down_.count(peer) > 0;
}

void shm_plane::report_down(const peer_id& peer) {
  // Whichever direction noticed first, sends to the peer fail from now on (or reconnect, if it
  // is back): the handler must never see a send to a peer it was just told about succeed.
  std::shared_ptr<outbound> o;
  {
    std::lock_guard lock(out_mutex_);
    if (auto it = out_.find(peer); it != out_.end()) {
      o = it->second;
      out_.erase(it);
    }
  }
  if (o) close_outbound(*o);
  disconnect_handler handler;
  {
    std::lock_guard lock(handler_mutex_);
    if (!reported_down_.insert(peer).second) return;
    handler = disconnect_handler_;
  }
  log_.info("shm {}: peer {} disconnected", cluster_, peer);
  if (handler) handler(peer);
  if (on_disconnect_) // the plane-independent signal the endpoint's liveness listens to
    on_disconnect_(peer, "shm peer process exited or closed its rings");
}

// ---- sending ------------------------------------------------------------------------------

send_status shm_plane::send(const peer_id& to, const envelope& message) {
  if (stopping_.load(std::memory_order_relaxed)) return send_status::closed;
  encoded_frame frame = message.encode_spliced();
  const frame_header h = read_header(frame.head.bytes().data());
  const auto* info = message_registry::instance().find(h.type);
  if (info && h.length > info->max_bytes) return send_status::too_large;
  const auto pieces = frame.pieces();
  return send_pieces(to, pieces, &frame);
}

send_status shm_plane::send_frame(const peer_id& to, std::span<const std::byte> frame) {
  const std::span<const std::byte> pieces[1] = {frame};
  return send_pieces(to, pieces, nullptr);
}

send_status shm_plane::send_pieces(const peer_id& to, pieces_view pieces, encoded_frame* owned) {
  if (stopping_.load(std::memory_order_relaxed)) return send_status::closed;
  size_t size = 0;
  for (auto piece : pieces) size += piece.size();
  if (size > options_.max_frame_bytes) return send_status::too_large;
  send_status status = send_status::ok;
  auto o = connection(to, status);
  if (!o) return status;
  std::unique_lock lock(o->mutex);
  if (o->down) return send_status::peer_down;
  auto full = [&] {
    lock.unlock();
    // A full ring may mean a dead receiver: answer that rather than an endless queue_full.
    if (!receiver_alive(*o)) {
      mark_down(*o);
      return send_status::peer_down;
    }
    counters_.queue_full.fetch_add(1, std::memory_order_relaxed);
    return send_status::queue_full;
  };
  if (o->pending.empty() && size <= o->ring.max_record_bytes()) {
    if (o->ring.try_push_gather(whole, pieces, false) != ring_status::ok) return full();
    lock.unlock();
    o->inbox->bell.ring();
  } else {
    if (o->pending_bytes + size > options_.outbound_limit_bytes) return full();
    outbound::queued q;
    if (owned) {
      // The frame's bodies are shared with the message, so queueing copies nothing.
      q.frame = std::move(*owned);
      q.pieces.assign(pieces.begin(), pieces.end());
    } else {
      q.frame.head.data.reset(static_cast<char*>(std::malloc(std::max<size_t>(size, 1))));
      if (!q.frame.head.data) throw std::bad_alloc();
      q.frame.head.size = size;
      size_t at = 0;
      for (auto piece : pieces) {
        if (!piece.empty()) std::memcpy(q.frame.head.data.get() + at, piece.data(), piece.size());
        at += piece.size();
      }
      q.pieces.push_back(q.frame.head.bytes());
    }
    q.size = size;
    o->pending_bytes += size;
    o->pending.push_back(std::move(q));
    lock.unlock();
    ensure_writer();
    {
      std::lock_guard wl(writer_mutex_);
      writer_kicked_ = true;
    }
    writer_wake_.notify_one();
  }
  counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_sent.fetch_add(size, std::memory_order_relaxed);
  return send_status::ok;
}

bool shm_plane::receiver_alive(const outbound& o) const {
  return !o.inbox_segment.closed() && o.inbox_segment.creator_alive();
}

bool shm_plane::link_dropped(const outbound& o) const {
  return o.inbox->slots[o.slot].generation.load(std::memory_order_acquire) != o.slot_generation;
}

bool shm_plane::retire_dropped_locked(outbound& o) {
  if (o.down || !link_dropped(o)) return false;
  o.down = true;
  o.pending.clear();
  o.pending_bytes = o.front_offset = 0;
  log_.limited(peer_lines_, log::level::warn, "link dropped by " + o.id,
               "shm {}: {} stopped reading our ring {}; connecting again", cluster_, o.id,
               o.ring.name());
  return true;
}

bool shm_plane::retire_dropped(outbound& o) {
  std::lock_guard lock(o.mutex);
  return retire_dropped_locked(o);
}

bool shm_plane::close_outbound(outbound& o) {
  std::lock_guard lock(o.mutex);
  if (o.down.exchange(true)) return false;
  o.pending.clear();
  o.pending_bytes = o.front_offset = 0;
  // Hand the slot back so the receiver frees it; the ring goes when the last user drops `o`.
  // Not when the receiver freed it already: it may hold another sender's ring by now.
  auto& slot = o.inbox->slots[o.slot];
  uint32_t ready = slot_ready;
  if (!link_dropped(o))
    slot.state.compare_exchange_strong(ready, slot_closed, std::memory_order_acq_rel);
  o.inbox->slots_changed.fetch_add(1, std::memory_order_release);
  o.inbox->bell.ring();
  return true;
}

void shm_plane::mark_down(outbound& o) {
  if (close_outbound(o)) report_down(o.id);
}

std::shared_ptr<shm_plane::outbound> shm_plane::connection(const peer_id& to, send_status& status) {
  std::shared_ptr<outbound> stale;
  {
    std::lock_guard lock(out_mutex_);
    auto it = out_.find(to);
    if (it != out_.end()) {
      // Only the inbox's closed flag here (one shared read); the creator's liveness costs a
      // /proc read and is checked by the sweep and when the ring is full.
      if (!it->second->down && !it->second->inbox_segment.closed() && !link_dropped(*it->second))
        return it->second;
      stale = it->second;
      out_.erase(it);
    }
  }
  // A dropped link is not a dead peer: nothing is reported, a fresh ring replaces it below.
  // Otherwise reported once; the peer may have come back, so connect afresh.
  if (stale && !retire_dropped(*stale)) mark_down(*stale);
  std::lock_guard lock(out_mutex_);
  auto it = out_.find(to);
  if (it != out_.end()) return it->second;
  auto o = connect(to, status, self_);
  if (o) out_[to] = o;
  return o;
}

std::shared_ptr<shm_plane::outbound> shm_plane::connect(const peer_id& to, send_status& status,
                                                        const peer_id& from) {
  status = send_status::unknown_peer;
  try {
    check_name_part("peer", to);
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
  std::optional<shm_segment> seg;
  try {
    seg = shm_segment::try_open(cluster_, "inbox." + to, segment_kind::inbox);
  } catch (const shm_error& e) {
    log_.limited(peer_lines_, log::level::warn, "cannot reach " + to, "shm {}: cannot reach {}: {}",
                 cluster_, to, e.what());
    return nullptr;
  }
  if (!seg) {
    // A peer we saw die stays "down" (not "unknown") until it comes back.
    std::lock_guard lock(handler_mutex_);
    if (reported_down_.count(to)) status = send_status::peer_down;
    return nullptr;
  }
  auto* inbox = reinterpret_cast<inbox_control*>(seg->data());
  if (seg->data_bytes() < sizeof(inbox_control) || inbox->magic != inbox_magic ||
      inbox->slot_count != inbox_slot_count) {
    log_.limited(peer_lines_, log::level::warn, "cannot reach " + to,
                 "shm {}: cannot reach {}: {} has a bad inbox header", cluster_, to, seg->name());
    return nullptr;
  }
  if (seg->closed() || !seg->creator_alive()) {
    if (!seg->creator_alive()) seg->unlink(); // stale: its creator cannot remove it any more
    status = send_status::peer_down;
    return nullptr;
  }
  auto o = std::make_shared<outbound>();
  o->id = to;
  const std::string rname = ring_name(to, from);
  o->ring = shm_ring::create(cluster_, rname, options_.ring_bytes, ring_role::producer);
  o->inbox = inbox;
  bool claimed = false;
  for (uint32_t i = 0; i < inbox_slot_count && !claimed; ++i) {
    auto& slot = inbox->slots[i];
    uint32_t expected = slot_free;
    if (!slot.state.compare_exchange_strong(expected, slot_claiming, std::memory_order_acq_rel))
      continue;
    // Who claims it, first: until then the receiver sees pid 0 and leaves the claim alone.
    slot.claimer_start.store(process_start_time(getpid()), std::memory_order_relaxed);
    slot.claimer_pid.store(getpid(), std::memory_order_release);
    o->slot_generation = slot.generation.load(std::memory_order_acquire);
    if (std::string why; !sign_ring(*o, *inbox, i, from, rname, why)) {
      slot.claimer_pid.store(0, std::memory_order_relaxed);
      // Nothing was published for this challenge: the slot goes back as it was.
      slot.state.store(slot_free, std::memory_order_release);
      log_.limited(peer_lines_, log::level::warn, "cannot sign for " + to,
                   "shm {}: cannot reach {}: {}", cluster_, to, why);
      status = send_status::unknown_peer;
      return nullptr;
    }
    std::memset(slot.sender, 0, sizeof slot.sender);
    std::memcpy(slot.sender, from.data(), from.size());
    std::memset(slot.ring, 0, sizeof slot.ring);
    std::memcpy(slot.ring, rname.data(), std::min(rname.size(), sizeof slot.ring - 1));
    slot.state.store(slot_ready, std::memory_order_release);
    o->slot = i;
    claimed = true;
  }
  if (!claimed) {
    log_.limited(peer_lines_, log::level::warn, "no free slot at " + to,
                 "shm {}: inbox of {} has no free slot", cluster_, to);
    status = send_status::queue_full;
    return nullptr;
  }
  inbox->slots_changed.fetch_add(1, std::memory_order_release);
  inbox->bell.ring();
  o->inbox_segment = std::move(*seg);
  {
    std::lock_guard lock(handler_mutex_);
    reported_down_.erase(to);
  }
  status = send_status::ok;
  return o;
}

bool shm_plane::sign_ring(outbound& o, const inbox_control& inbox, uint32_t slot,
                          const peer_id& from, const std::string& ring, std::string& why) {
  if (!auth_) return true;
  const auto& s = inbox.slots[slot];
  link_nonce inbox_nonce, challenge;
  std::memcpy(inbox_nonce.data(), inbox.nonce, link_nonce_bytes);
  std::memcpy(challenge.data(), s.challenge, link_nonce_bytes);
  const link_claim claim{cluster_,
                         from,
                         o.id,
                         ring,
                         inbox_nonce,
                         challenge,
                         slot,
                         o.ring.segment().creator_pid(),
                         o.ring.segment().creator_start()};
  const auto mac = auth_->sign(claim, why);
  if (!mac) return false;
  std::memcpy(o.ring.credential().data(), mac->data(), mac->size());
  return true;
}

send_status shm_plane::send_claiming_for_test(const peer_id& from, const peer_id& to,
                                              const envelope& message) {
  send_status status = send_status::ok;
  std::lock_guard lock(out_mutex_);
  auto o = connect(to, status, from);
  if (!o) return status;
  const auto frame = message.encode();
  if (o->ring.try_push(whole, frame.bytes(), {}, false) != ring_status::ok)
    return send_status::queue_full;
  o->inbox->bell.ring();
  claimed_for_test_.push_back(o); // its ring lives until this plane stops
  return send_status::ok;
}

send_status shm_plane::corrupt_ring_for_test(const peer_id& to) {
  send_status status = send_status::ok;
  auto o = connection(to, status);
  if (!o) return status;
  std::lock_guard lock(o->mutex);
  o->ring.push_corrupt_record_for_test();
  o->inbox->bell.ring();
  return send_status::ok;
}

// ---- the writer thread: streams frames too big for one record ---------------------------

namespace {

// The views covering bytes [offset, offset + n) of a frame made of `pieces`, appended to `out`.
void slice(std::span<const std::span<const std::byte>> pieces, size_t offset, size_t n,
           std::vector<std::span<const std::byte>>& out) {
  for (auto piece : pieces) {
    if (n == 0) return;
    if (offset >= piece.size()) {
      offset -= piece.size();
      continue;
    }
    const size_t take = std::min(piece.size() - offset, n);
    out.push_back(piece.subspan(offset, take));
    offset = 0;
    n -= take;
  }
}

} // namespace

bool shm_plane::flush(outbound& o, bool& still_pending) {
  std::unique_lock lock(o.mutex);
  bool pushed = false;
  const size_t piece_limit = std::min(options_.fragment_bytes, o.ring.max_record_bytes());
  std::vector<std::span<const std::byte>> record;
  retire_dropped_locked(o); // nobody reads the ring any more: what is queued is lost with it
  while (!o.down && !o.pending.empty()) {
    const auto& frame = o.pending.front();
    size_t piece = 0;
    ring_status st;
    record.clear();
    const uint64_t total = frame.size; // the first piece says how many bytes will follow
    uint32_t tag;
    if (o.front_offset == 0 && frame.size <= o.ring.max_record_bytes()) {
      piece = frame.size;
      tag = whole;
    } else if (o.front_offset == 0) {
      piece = std::min(frame.size, piece_limit - sizeof total);
      record.push_back(std::as_bytes(std::span(&total, 1)));
      tag = first_piece;
    } else {
      piece = std::min(frame.size - o.front_offset, piece_limit);
      tag = o.front_offset + piece == frame.size ? last_piece : middle_piece;
    }
    slice(frame.pieces, o.front_offset, piece, record);
    st = o.ring.try_push_gather(tag, record, false);
    if (st != ring_status::ok) break;
    pushed = true;
    o.front_offset += piece;
    if (o.front_offset == frame.size) {
      o.pending_bytes -= frame.size;
      o.front_offset = 0;
      o.pending.pop_front();
    }
  }
  still_pending = !o.down && !o.pending.empty();
  lock.unlock();
  if (pushed) o.inbox->bell.ring();
  return pushed;
}

void shm_plane::write_loop() {
  while (!stopping_.load()) {
    {
      std::unique_lock lock(writer_mutex_);
      writer_wake_.wait(lock, [&] { return writer_kicked_; });
      writer_kicked_ = false;
    }
    for (;;) {
      std::vector<std::shared_ptr<outbound>> peers;
      {
        std::lock_guard lock(out_mutex_);
        for (auto& [id, o] : out_) peers.push_back(o);
      }
      bool progress = false, any_pending = false;
      std::shared_ptr<outbound> stalled;
      for (auto& o : peers) {
        bool pending = false;
        progress |= flush(*o, pending);
        if (pending) {
          any_pending = true;
          stalled = o;
        }
      }
      if (!any_pending || stopping_.load()) break;
      if (!progress) {
        // Short slices: other peers may have pending frames too, and stop() must not wait long.
        const size_t piece = std::min(options_.fragment_bytes, stalled->ring.max_record_bytes());
        if (!stalled->ring.wait_for_space(piece, std::chrono::milliseconds(10), options_.spin) &&
            !receiver_alive(*stalled))
          mark_down(*stalled);
      }
    }
  }
}

// ---- receiving ----------------------------------------------------------------------------

void shm_plane::receive_loop() {
  using clock = std::chrono::steady_clock;
  uint32_t seen_slots = ~0u, seen_generation = ~0u;
  message_handler handler;
  auto next_sweep = clock::now() + options_.liveness_interval;
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (const uint32_t g = handler_generation_.load(std::memory_order_acquire);
        g != seen_generation) {
      seen_generation = g;
      std::lock_guard lock(handler_mutex_);
      handler = handler_;
    }
    if (const uint32_t s = inbox_->slots_changed.load(std::memory_order_acquire); s != seen_slots) {
      seen_slots = s;
      scan_slots();
    }
    bool worked = false;
    if (handler)
      for (size_t i = 0; i < in_.size(); ++i) worked |= drain(*in_[i], handler, 64);
    drop_unreadable_rings();
    if (clock::now() >= next_sweep) {
      sweep();
      next_sweep = clock::now() + options_.liveness_interval;
    }
    if (worked) continue;
    inbox_->bell.wait(
        [&] {
          if (stopping_.load(std::memory_order_relaxed) ||
              inbox_->slots_changed.load(std::memory_order_acquire) != seen_slots ||
              handler_generation_.load(std::memory_order_acquire) != seen_generation)
            return true;
          if (handler)
            for (auto& in : in_)
              if (in->ring.has_data()) return true;
          return false;
        },
        options_.spin, next_sweep);
  }
}

void shm_plane::scan_slots() {
  for (uint32_t i = 0; i < inbox_slot_count; ++i) {
    auto& slot = inbox_->slots[i];
    const uint32_t state = slot.state.load(std::memory_order_acquire);
    if (state == slot_free) continue;
    size_t index = in_.size();
    for (size_t k = 0; k < in_.size(); ++k)
      if (in_[k]->slot == i) index = k;
    const bool known = index < in_.size();
    if (state == slot_claiming) {
      // pid 0: a claim in progress (free_slot clears the claimer); a dead claimer's slot is freed.
      const auto pid = slot.claimer_pid.load(std::memory_order_acquire);
      if (pid != 0 && !process_alive(pid, slot.claimer_start.load())) free_slot(i);
    } else if (state == slot_ready && !known) {
      auto in = std::make_unique<inbound>();
      in->slot = i;
      in->from = field(slot.sender);
      const std::string rname = field(slot.ring);
      try {
        check_name_part("peer", in->from);
        if (rname.rfind("ring." + self_ + "." + in->from + ".", 0) != 0)
          throw shm_error("ring name '" + rname + "' does not match the slot");
        auto ring = shm_ring::try_open(cluster_, rname, ring_role::consumer);
        if (!ring)
          throw shm_error("its ring " + shm_segment::full_name(cluster_, rname) +
                          " does not exist");
        in->ring = std::move(*ring);
      } catch (const std::exception& e) {
        // The sender's name is whatever bytes it wrote into the slot.
        log_.limited(peer_lines_, log::level::warn, "unusable inbox slot from " + in->from,
                     "shm {}: ignoring inbox slot {} from '{}': {}", cluster_, i, in->from,
                     e.what());
        free_slot(i);
        continue;
      }
      if (std::string why; !ring_proven(*in, rname, why)) {
        counters_.identity_mismatch.fetch_add(1, std::memory_order_relaxed);
        log_.limited(peer_lines_, log::level::warn, "unproven ring from " + in->from,
                     "shm {}: refusing ring {} in inbox slot {} claiming to be from {}: {}",
                     cluster_, rname, i, in->from, why);
        free_slot(i); // never read; the slot's next claimer gets a fresh challenge
        continue;
      }
      {
        std::lock_guard lock(handler_mutex_);
        reported_down_.erase(in->from);
      }
      in_.push_back(std::move(in));
    } else if (state == slot_closed) {
      if (known) {
        message_handler handler;
        {
          std::lock_guard lock(handler_mutex_);
          handler = handler_;
        }
        // A clean close: what the sender wrote before closing is still delivered.
        while (handler && drain(*in_[index], handler, 1024)) {}
        const peer_id from = in_[index]->from;
        remove_inbound(index, false);
        report_down(from);
      } else {
        free_slot(i);
      }
    }
  }
}

bool shm_plane::ring_proven(inbound& in, const std::string& ring, std::string& why) {
  if (!auth_) return true;
  const auto& seg = in.ring.segment();
  const link_claim claim{cluster_, in.from,           self_,
                         ring,     inbox_nonce_,      slot_challenges_[in.slot],
                         in.slot,  seg.creator_pid(), seg.creator_start()};
  // Copied out first: the creator may rewrite its header while we check it.
  link_mac mac;
  std::memcpy(mac.data(), in.ring.credential().data(), mac.size());
  return auth_->verify(claim, mac, why);
}

void shm_plane::free_slot(uint32_t index) {
  auto& slot = inbox_->slots[index];
  slot_challenges_[index] = random_link_nonce();
  std::memcpy(slot.challenge, slot_challenges_[index].data(), link_nonce_bytes);
  slot.claimer_pid.store(0, std::memory_order_relaxed); // the next claimer writes its own first
  // The sender that held the slot sees the new generation and connects again.
  slot.generation.fetch_add(1, std::memory_order_release);
  slot.state.store(slot_free, std::memory_order_release);
}

void shm_plane::drop_unreadable_rings() {
  for (size_t i = in_.size(); i-- > 0;)
    if (in_[i]->unreadable) remove_inbound(i, false);
}

void shm_plane::remove_inbound(size_t index, bool unlink_ring) {
  auto& in = *in_[index];
  if (unlink_ring) in.ring.segment().unlink();
  free_slot(in.slot);
  in_.erase(in_.begin() + static_cast<std::ptrdiff_t>(index));
}

void shm_plane::sweep() {
  for (size_t i = in_.size(); i-- > 0;) {
    auto& in = *in_[i];
    if (in.ring.segment().creator_alive()) continue;
    // Whole records the sender finished before dying are delivered; a half-sent frame is not.
    message_handler handler;
    {
      std::lock_guard lock(handler_mutex_);
      handler = handler_;
    }
    while (handler && drain(in, handler, 1024)) {}
    const peer_id from = in.from;
    remove_inbound(i, true);
    report_down(from);
  }
  std::vector<std::shared_ptr<outbound>> dead;
  {
    std::lock_guard lock(out_mutex_);
    for (auto it = out_.begin(); it != out_.end();) {
      if (!it->second->down && receiver_alive(*it->second)) {
        ++it;
        continue;
      }
      dead.push_back(it->second);
      it = out_.erase(it);
    }
  }
  for (auto& o : dead) mark_down(*o);
}

void shm_plane::bad_frame(inbound& in, frame_error e, const std::string& why) {
  counters_.bad_frames.add(e);
  report_bad_frame(in, std::string(to_string(e)) + ": " + why);
}

void shm_plane::report_bad_frame(inbound& in, const std::string& why) {
  ++in.bad_frames;
  log_.limited(peer_lines_, log::level::warn, "bad frame from " + in.from,
               "shm {}: bad frame #{} from {}: {}", cluster_, in.bad_frames, in.from, why);
}

bool shm_plane::drain(inbound& in, const message_handler& handler, size_t budget) {
  size_t n = 0;
  if (in.unreadable) return false;
  for (; n < budget; ++n) {
    std::optional<ring_record> r;
    try {
      r = in.ring.peek();
    } catch (const shm_error& e) {
      // A scribbled ring cannot be resynchronised: count it and stop reading it. Its slot is
      // freed after this round, and the sender, which lives, connects again with a fresh ring.
      bad_frame(in, frame_error::truncated, e.what());
      in.unreadable = true;
      return n > 0;
    }
    if (!r) break;
    auto message = take_record(in, *r);
    in.ring.pop();
    if (!message) continue;
    counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
    try {
      handler(in.from, std::move(*message));
    } catch (const std::exception& e) {
      log_.limited(peer_lines_, log::level::error, "handler threw on a message from " + in.from,
                   "shm {}: handler threw on a message from {}: {}", cluster_, in.from, e.what());
    }
  }
  return n > 0;
}

std::optional<envelope> shm_plane::take_record(inbound& in, const ring_record& r) {
  std::string why;
  // Without an owner (a record in the ring) fields are copied out; with one (a reassembly buffer
  // of its own) they reference it.
  auto decode = [&](std::span<const std::byte> frame,
                    std::shared_ptr<const void> owner) -> std::optional<envelope> {
    counters_.bytes_received.fetch_add(frame.size(), std::memory_order_relaxed);
    auto m = decode_frame(frame, std::move(owner), counters_.bad_frames, &why);
    if (!m) report_bad_frame(in, why); // decode_frame counted the reason
    return m;
  };
  auto abandon = [&](const char* what) {
    if (in.assembling)
      bad_frame(in, frame_error::truncated,
                std::string(what) + " after " + std::to_string(in.assembled) + " of " +
                    std::to_string(in.expected) + " bytes of a fragmented frame");
    in.assembling = false;
  };
  switch (r.tag) {
  case whole:
    abandon("a whole frame");
    in.discarding = false;
    if (r.bytes.size() >= pooled_record_bytes) {
      // Copied out of the ring once, into a warm pooled buffer the message then references,
      // rather than field by field into fresh allocations that fault in their pages.
      auto copy = reassembly_pool_->take(r.bytes.size());
      std::memcpy(copy.get(), r.bytes.data(), r.bytes.size());
      const std::span<const std::byte> frame(copy.get(), r.bytes.size());
      return decode(frame, std::move(copy));
    }
    return decode(r.bytes, nullptr);
  case first_piece: {
    abandon("a new first piece");
    in.discarding = false;
    uint64_t total = 0;
    if (r.bytes.size() < sizeof total) {
      bad_frame(in, frame_error::truncated, "first piece without its length");
      in.discarding = true;
      return std::nullopt;
    }
    std::memcpy(&total, r.bytes.data(), sizeof total);
    const auto body = r.bytes.subspan(sizeof total);
    if (total > options_.max_frame_bytes || body.size() > total) {
      bad_frame(in, frame_error::oversized,
                "fragmented frame of " + std::to_string(total) + " bytes, limit " +
                    std::to_string(options_.max_frame_bytes));
      in.discarding = true;
      return std::nullopt;
    }
    in.assembly = reassembly_pool_->take(total);
    std::memcpy(in.assembly.get(), body.data(), body.size());
    in.assembled = body.size();
    in.expected = total;
    in.assembling = true;
    return std::nullopt;
  }
  case middle_piece:
  case last_piece: {
    if (!in.assembling) {
      if (!in.discarding) bad_frame(in, frame_error::truncated, "a piece without its first piece");
      in.discarding = r.tag == middle_piece;
      return std::nullopt;
    }
    if (in.assembled + r.bytes.size() > in.expected) {
      bad_frame(in, frame_error::trailing_bytes,
                "pieces longer than the announced " + std::to_string(in.expected) + " bytes");
      in.assembling = false;
      in.discarding = r.tag == middle_piece;
      return std::nullopt;
    }
    std::memcpy(in.assembly.get() + in.assembled, r.bytes.data(), r.bytes.size());
    in.assembled += r.bytes.size();
    if (r.tag == middle_piece) return std::nullopt;
    in.assembling = false;
    auto assembly = std::move(in.assembly); // the message, if any, owns it from here
    if (in.assembled != in.expected) {
      bad_frame(in, frame_error::truncated,
                "last piece at " + std::to_string(in.assembled) + " of " +
                    std::to_string(in.expected) + " bytes");
      return std::nullopt;
    }
    const std::span<const std::byte> frame(assembly.get(), in.expected);
    return decode(frame, std::move(assembly));
  }
  default:
    bad_frame(in, frame_error::bad_magic, "unknown ring record tag " + std::to_string(r.tag));
    return std::nullopt;
  }
}

} // namespace supernode::transport
