// The rank fabric over ZeroMQ: each rank's region lives in private memory, and peers reach it by
// sending messages that this rank's receive thread applies (memcpy, then the flag's release add).
//
// Sockets and threads. Each fabric has its own zmq context. A ROUTER bound at addresses[rank] is
// owned by the receive thread alone; one DEALER per peer (routing id "rank<N>") is used by the
// calling threads under send_mutex_, so write/add/connect/leave may come from any thread (a mutex
// hand-over is the full barrier zmq asks for when a socket changes threads). The receive thread
// never sends: the handshake is symmetric instead of request/reply.
//
// Ordering. All traffic from rank A to rank B goes through A's one DEALER into B's ROUTER, a FIFO
// pipe, and B applies each message completely before reading the next, so every write that A
// issued before an add() is in B's region before that add's release fetch_add. A waiter that
// acquires the flag therefore sees the data, exactly as in shared memory.
//
// Wire format (host byte order: a group runs one build on one ISA). One zmq message is
//   [write part]* [tail]
//   write part: u64 offset, then the bytes for [offset, offset + part size - 8)
//   tail (32 bytes): u32 magic, u8 kind, u8 ack, u16 zero, u64 a, b, c
//     hello    no write parts; a = ranks, b = bytes, c = flags; ack = "I have had your hello"
//     writes   apply the parts (a batch flushed early, before its add, to bound memory)
//     add      apply the parts, then flag a += b
//     leaving  no write parts
// The sender is named by its routing id ("rank<N>@<group>#<nonce>", zmq_curve.hpp), which the
// ROUTER takes from the connection, not from the payload, so even a garbage frame can be
// attributed. A rank is heard only on the connection its first hello came on (the nonce tells
// connections apart). With the cluster's keys every connection is CurveZMQ: only instances of the
// cluster get in, and a message whose connection proved another instance's key than that of the
// rank it names is dropped.
//
// Handshake. connect() sends hello(ack = heard from that peer) to every peer until each peer has
// both said hello and acknowledged ours. A peer that acknowledged us has bound its ROUTER and
// received over our DEALER; its hello proves the reverse direction. Before returning true a rank
// has sent its own ack to everyone, so the peers finish too.
#include "transport/cluster_keys.hpp"
#include "transport/rank_fabric.hpp"
#include "transport/shm_sync.hpp"
#include "transport/zmq_curve.hpp"
#include "transport/zmq_util.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <pthread.h>
#include <stdexcept>
#include <sys/eventfd.h>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace supernode::transport {

namespace {

constexpr uint32_t wire_magic = 0x46524E53; // "SNRF"
enum class kind : uint8_t { hello = 1, writes = 2, add = 3, leaving = 4 };

struct tail {
  uint32_t magic = wire_magic;
  uint8_t kind = 0;
  uint8_t ack = 0;
  uint16_t zero = 0;
  uint64_t a = 0, b = 0, c = 0;
};
static_assert(sizeof(tail) == 32);

tail make_tail(kind k, uint64_t a = 0, uint64_t b = 0, uint64_t c = 0, bool ack = false) {
  return {wire_magic, static_cast<uint8_t>(k), static_cast<uint8_t>(ack), 0, a, b, c};
}

constexpr size_t write_header = sizeof(uint64_t);
// Large writes travel in parts of at most this size and a batch is sent once it holds this much,
// so the receiver copies one part while the sender prepares the next and no batch grows without
// bound while a caller issues many writes before its add().
constexpr size_t max_part_bytes = size_t{256} << 10;
// zmq bounds queues in messages, not bytes: with parts of at most max_part_bytes this caps what
// one peer can have queued here and there at 2 * 256 * 256 KiB. A full queue blocks the sender
// (flow control), never the receive thread, which drains independently of its rank.
constexpr int queue_messages = 256;
// A peer whose receiver stays this long behind is treated as broken rather than waited on forever.
constexpr auto send_timeout = std::chrono::seconds(60);
constexpr auto hello_interval = std::chrono::milliseconds(100);
// Bounded so a destructor never hangs on a vanished peer, long enough to flush a "leaving".
constexpr int close_linger_ms = 200;

using detail::open_eventfd;
using detail::poll_retrying;
using detail::printable;

// "rank<r>@<group>": the group name carries the formation's epoch, so after a group re-forms
// a rank still on the old formation (same address, same instance key) is never taken for one.
std::string routing_id(int rank, const std::string& group) {
  return "rank" + std::to_string(rank) + "@" + group;
}

std::string range_text(size_t offset, size_t size) {
  // Appended piecewise: g++ 12 warns falsely (-Wrestrict) on "literal" + std::string&&.
  std::string s = "[";
  s += std::to_string(offset);
  s += ", +";
  s += std::to_string(size);
  s += ")";
  return s;
}

// One cache line per flag: different peers' messages bump different flags, and packing them
// would make every add invalidate its neighbours' lines under the waiters spinning on them.
struct alignas(64) flag_slot {
  std::atomic<uint64_t> value{0};
  doorbell bell;
};
static_assert(sizeof(flag_slot) == 64);

struct aligned_delete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

class zmq_rank_fabric final : public rank_fabric {
public:
  explicit zmq_rank_fabric(const rank_fabric_options& o)
      : rank_fabric(o.rank, o.ranks, o.bytes, o.flags, o.log), group_(o.group),
        addresses_(o.addresses), keys_(o.keys), instances_(o.instances),
        slots_(new flag_slot[o.flags]), context_(1), router_(context_, zmq::socket_type::router) {
    if (addresses_.size() != static_cast<size_t>(ranks_))
      throw std::invalid_argument("zmq rank fabric: group " + group_ + " has " +
                                  std::to_string(ranks_) + " ranks but " +
                                  std::to_string(addresses_.size()) + " addresses");
    if (keys_ && instances_.size() != static_cast<size_t>(ranks_))
      throw std::invalid_argument("zmq rank fabric: group " + group_ + " has " +
                                  std::to_string(ranks_) + " ranks but " +
                                  std::to_string(instances_.size()) + " instance names");
    const auto own = keys_ ? keys_->own(instances_[rank_]) : curve_keypair{};
    const size_t alloc = std::max<size_t>(64, (bytes_ + 63) / 64 * 64);
    data_.reset(static_cast<std::byte*>(::operator new[](alloc, std::align_val_t{64})));
    std::memset(data_.get(), 0, alloc);

    peers_.reserve(ranks_);
    for (int r = 0; r < ranks_; ++r) {
      peers_.push_back(std::make_unique<peer>());
      if (r == rank_) continue;
      auto& p = *peers_[r];
      p.dealer = zmq::socket_t(context_, zmq::socket_type::dealer);
      p.dealer.set(zmq::sockopt::routing_id,
                   detail::connection_routing_id(routing_id(rank_, group_)));
      p.dealer.set(zmq::sockopt::linger, 0);
      if (keys_) {
        const auto key = keys_->public_key(instances_[r]);
        if (!key)
          throw std::invalid_argument("zmq rank fabric: group " + group_ + ": no public key for " +
                                      instances_[r] + " (rank " + std::to_string(r) + ") in " +
                                      keys_->dir().string() +
                                      " (`supernode cluster keys --config FILE` makes them)");
        detail::make_curve_client(p.dealer, own, *key);
      }
      p.dealer.set(zmq::sockopt::sndhwm, queue_messages);
      // Peers start in any order: retry an unbound ipc path or refused port quickly, and queue
      // what we send meanwhile (ZMQ_IMMEDIATE stays off) so the first hello is not lost.
      p.dealer.set(zmq::sockopt::reconnect_ivl, 10);
      p.dealer.set(zmq::sockopt::reconnect_ivl_max, 200);
      try {
        p.dealer.connect(addresses_[r]);
      } catch (const zmq::error_t& e) {
        throw std::invalid_argument("zmq rank fabric: group " + group_ +
                                    ": cannot connect to rank " + std::to_string(r) + " at " +
                                    addresses_[r] + ": " + e.what());
      }
    }
    // Bound after the DEALERs, whose addresses are the likelier to be malformed, so a throwing
    // constructor leaves no ipc file behind. The ZAP handler before the ROUTER: unbound, libzmq
    // would let every client in.
    if (keys_) {
      zap_ = std::make_unique<detail::zap_handler>(
          context_, keys_, [this](const std::string& address, const std::string& why) {
            log_.limited(peer_lines_, log::level::warn, "refused a key",
                         "zmq rank fabric {} rank {}: refused a client at {}: {}", group_, rank_,
                         address, why);
          });
      detail::make_curve_server(router_, own);
    }
    handshakes_ = std::make_unique<detail::handshake_watch>(context_, router_);
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::rcvhwm, queue_messages);
    // A frame larger than any part a peer sends is garbage: zmq drops that connection instead of
    // buffering it (a raw socket could otherwise make this rank allocate without bound).
    router_.set(zmq::sockopt::maxmsgsize,
                static_cast<int64_t>(write_header + std::min(bytes_, max_part_bytes) + 64));
    try {
      router_.bind(detail::bindable_endpoint(addresses_[rank_]));
    } catch (const zmq::error_t& e) {
      throw std::runtime_error("zmq rank fabric: group " + group_ + " rank " +
                               std::to_string(rank_) + " cannot bind " + addresses_[rank_] + ": " +
                               e.what());
    }
    const std::string bound = router_.get(zmq::sockopt::last_endpoint);
    if (bound.starts_with("ipc://") && bound.size() > 6 && bound[6] != '@')
      ipc_file_ = bound.substr(6);

    stop_fd_ = open_eventfd();
    receiver_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "sn-fabric-rx");
      run_receiver();
    });
  }

  ~zmq_rank_fabric() override {
    leave();
    detail::signal_eventfd(stop_fd_);
    receiver_.join();
    handshakes_->close();
    router_.close();
    if (zap_) zap_->close();
    {
      std::lock_guard lock(send_mutex_);
      for (auto& p : peers_) {
        if (!p->dealer) continue;
        // Only a peer that is up and still in the group is worth waiting for: it gets our
        // "leaving"; a vanished one would hold zmq_ctx_term for the whole linger.
        const bool live = p->heard.load() && !p->left.load();
        p->dealer.set(zmq::sockopt::linger, live ? close_linger_ms : 0);
        p->dealer.close();
      }
    }
    context_.close();
    ::close(stop_fd_);
    if (!ipc_file_.empty()) ::unlink(ipc_file_.c_str()); // zmq leaves the socket file behind
  }

  bool connect(std::chrono::milliseconds timeout, const std::function<bool()>& give_up,
               std::string& why) override {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + timeout;
    auto next_hello = clock::now();
    std::vector<bool> told(ranks_, false); // our ack reached the DEALER's queue
    for (;;) {
      {
        std::lock_guard lock(send_mutex_);
        const bool resend = clock::now() >= next_hello;
        if (resend) next_hello = clock::now() + hello_interval;
        for (int r = 0; r < ranks_; ++r) {
          if (r == rank_) continue;
          auto& p = *peers_[r];
          const bool heard = p.heard.load(std::memory_order_acquire);
          if ((heard && !told[r]) || (resend && !(told[r] && p.acked.load()))) {
            const auto t =
                make_tail(kind::hello, static_cast<uint64_t>(ranks_), bytes_, flags_, heard);
            if (send(r, t, false) && heard) told[r] = true;
          }
        }
      }
      std::string missing;
      {
        std::lock_guard lock(failure_mutex_);
        for (int r = 0; r < ranks_; ++r) {
          if (r == rank_) continue;
          if (!peers_[r]->config_error.empty()) {
            why = peers_[r]->config_error;
            return false;
          }
          if (!(told[r] && peers_[r]->acked.load(std::memory_order_acquire)))
            missing +=
                (missing.empty() ? "" : ", ") + std::to_string(r) + " (" + addresses_[r] + ")";
        }
      }
      if (missing.empty()) {
        connected_ = true;
        return true;
      }
      if (give_up() || clock::now() >= deadline) {
        why = "group " + group_ + ": rank " + std::to_string(rank_) + " cannot reach rank(s) " +
              missing + " (no hello/ack handshake over zmq)";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::byte* local() override { return data_.get(); }

  void write(int to, size_t offset, std::span<const std::byte> data) override {
    check_peer(to);
    if (offset > bytes_ || data.size() > bytes_ - offset)
      throw std::out_of_range("zmq rank fabric: write of " + range_text(offset, data.size()) +
                              " to rank " + std::to_string(to) + " is outside its " +
                              std::to_string(bytes_) + "-byte region");
    if (data.empty()) return;
    if (to == rank_) {
      std::memcpy(data_.get() + offset, data.data(), data.size());
      return;
    }
    std::lock_guard lock(send_mutex_);
    require_connected(to);
    auto& p = *peers_[to];
    for (size_t done = 0; done < data.size();) {
      const size_t n = std::min(max_part_bytes, data.size() - done);
      zmq::message_t part(write_header + n);
      const uint64_t at = offset + done;
      std::memcpy(part.data(), &at, sizeof at);
      std::memcpy(static_cast<std::byte*>(part.data()) + write_header, data.data() + done, n);
      p.pending.push_back(std::move(part));
      p.pending_bytes += n;
      done += n;
      if (p.pending_bytes >= max_part_bytes) send(to, make_tail(kind::writes), true);
    }
    bytes_sent_ += data.size();
  }

  void add(int to, size_t flag, uint64_t delta) override {
    check_peer(to);
    check_flag(flag);
    if (to == rank_) {
      apply_add(flag, delta);
      return;
    }
    std::lock_guard lock(send_mutex_);
    require_connected(to);
    send(to, make_tail(kind::add, flag, delta), true);
  }

  uint64_t load(size_t flag) const override {
    check_flag(flag);
    return slots_[flag].value.load(std::memory_order_acquire);
  }

  bool wait(size_t flag, uint64_t at_least, std::chrono::nanoseconds timeout) override {
    check_flag(flag);
    auto& f = slots_[flag];
    // A short spin, as in the shm fabric: ranks can outnumber cores, and here the receive thread
    // that applies the message needs a core too.
    return f.bell.wait([&] { return f.value.load(std::memory_order_acquire) >= at_least; },
                       std::chrono::microseconds(20), std::chrono::steady_clock::now() + timeout);
  }

  std::string peer_failure() const override {
    std::lock_guard lock(failure_mutex_);
    return failure_;
  }

  void leave() override {
    std::lock_guard lock(send_mutex_);
    if (left_) return;
    left_ = true;
    for (int r = 0; r < ranks_; ++r) {
      if (r == rank_) continue;
      // Writes without their add would never be waited for: drop them with the goodbye.
      peers_[r]->pending.clear();
      peers_[r]->pending_bytes = 0;
      send(r, make_tail(kind::leaving), false);
    }
  }

private:
  struct peer {
    zmq::socket_t dealer;                // send_mutex_
    std::vector<zmq::message_t> pending; // send_mutex_: write parts awaiting their tail
    size_t pending_bytes = 0;            // send_mutex_
    std::atomic<bool> heard{false};      // receiver: its hello arrived
    std::atomic<bool> acked{false};      // receiver: it has had our hello
    std::atomic<bool> left{false};       // receiver: it said "leaving"
    std::string connection;              // receiver: the routing id its first good hello came on
    std::string config_error;            // failure_mutex_
  };

  void require_connected(int to) const {
    if (!connected_)
      throw std::logic_error("rank fabric: rank " + std::to_string(to) + " is not connected");
  }

  void apply_add(size_t flag, uint64_t delta) {
    slots_[flag].value.fetch_add(delta, std::memory_order_acq_rel);
    slots_[flag].bell.ring();
  }

  // Sends peer `to`'s pending write parts followed by `t` as one message. `block`: wait out a
  // full queue (data must not be lost); otherwise a full queue drops the message (a hello is
  // resent, a "leaving" must not hang a destructor). Returns whether it was queued.
  bool send(int to, const tail& t, bool block) {
    auto& p = *peers_[to];
    zmq::message_t last(&t, sizeof t);
    const size_t count = p.pending.size() + 1;
    const auto give_up_at = std::chrono::steady_clock::now() + send_timeout;
    for (size_t i = 0; i < count; ++i) {
      auto& part = i + 1 < count ? p.pending[i] : last;
      const auto flags = i + 1 < count ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                                       : zmq::send_flags::dontwait;
      // zmq counts its high-water mark in whole messages, so only the first part can be refused.
      while (!p.dealer.send(part, flags)) {
        // Past the first part, waiting is the only way not to leave a half-sent message behind.
        if (!block && i == 0) return false;
        if (p.left.load())
          throw std::runtime_error("zmq rank fabric: rank " + std::to_string(to) +
                                   " left the group; cannot send to it");
        if (std::chrono::steady_clock::now() >= give_up_at)
          throw std::runtime_error("zmq rank fabric: rank " + std::to_string(to) + " at " +
                                   addresses_[to] + " has not drained its queue for " +
                                   std::to_string(send_timeout.count()) + " s");
        std::vector<zmq::pollitem_t> items{{p.dealer.handle(), 0, ZMQ_POLLOUT, 0}};
        poll_retrying(items, std::chrono::milliseconds(50));
      }
    }
    p.pending.clear();
    p.pending_bytes = 0;
    return true;
  }

  void run_receiver() {
    std::vector<zmq::pollitem_t> items{{router_.handle(), 0, ZMQ_POLLIN, 0},
                                       {nullptr, stop_fd_, ZMQ_POLLIN, 0},
                                       handshakes_->poll_item()};
    if (zap_) items.push_back(zap_->poll_item());
    std::vector<zmq::message_t> parts;
    try {
      for (;;) {
        poll_retrying(items, std::chrono::milliseconds(-1));
        if (items[1].revents) return;
        if (items[2].revents)
          handshakes_->drain([this](const std::string& where, const std::string& why) {
            trust_rejections_.fetch_add(1);
            log_.limited(peer_lines_, log::level::warn, "refused a handshake",
                         "zmq rank fabric {} rank {}: refused a handshake from {}: {}", group_,
                         rank_, where, why);
          });
        if (zap_ && items[3].revents) zap_->serve();
        // A bounded batch, then poll again, so the stop signal is noticed under a flood.
        for (int i = 0; i < 256; ++i) {
          parts.clear();
          try {
            if (!zmq::recv_multipart(router_, std::back_inserter(parts), zmq::recv_flags::dontwait))
              break;
          } catch (const zmq::error_t& e) {
            if (e.num() == EINTR) continue;
            throw;
          }
          handle(parts);
        }
      }
    } catch (const std::exception& e) {
      // Without this thread nothing reaches the region any more: say so where waiters look.
      record_failure("zmq rank fabric: rank " + std::to_string(rank_) +
                     "'s receive thread failed: " + e.what());
    }
  }

  // The rank a routing id names, or -1 for a socket outside the group (or posing as us).
  int sender_rank(const zmq::message_t& id) const {
    std::string_view s = detail::claimed_name(id.to_string_view());
    const auto at = s.find('@');
    if (at == std::string_view::npos || s.substr(at + 1) != group_) return -1;
    s = s.substr(0, at);
    if (s.size() < 5 || s.size() > 14 || !s.starts_with("rank")) return -1;
    if (s.size() > 5 && s[4] == '0') return -1;
    int64_t r = 0;
    for (size_t i = 4; i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9') return -1;
      r = r * 10 + (s[i] - '0');
    }
    return r < ranks_ && r != rank_ ? static_cast<int>(r) : -1;
  }

  // Why `body` (parts after the routing id) cannot be applied, or empty. Everything is checked
  // before anything is applied, so a bad message leaves the region exactly as it was.
  std::string validate(std::span<const zmq::message_t> body, tail& t) const {
    if (body.empty()) return "no parts";
    const auto& last = body.back();
    if (last.size() != sizeof(tail))
      return "last part holds " + std::to_string(last.size()) + " bytes, a tail holds " +
             std::to_string(sizeof(tail));
    std::memcpy(&t, last.data(), sizeof t);
    if (t.magic != wire_magic) return "bad magic";
    const size_t writes = body.size() - 1;
    switch (static_cast<kind>(t.kind)) {
    case kind::hello:
    case kind::leaving:
      if (writes != 0) return std::to_string(writes) + " write part(s) on a control message";
      return {};
    case kind::add:
      if (t.a >= flags_)
        return "flag " + std::to_string(t.a) + " is outside the " + std::to_string(flags_) +
               " flags";
      break;
    case kind::writes:
      break;
    default:
      return "unknown kind " + std::to_string(t.kind);
    }
    for (size_t i = 0; i < writes; ++i) {
      const auto& part = body[i];
      if (part.size() < write_header)
        return "write part " + std::to_string(i) + " holds " + std::to_string(part.size()) +
               " bytes, less than its offset";
      uint64_t offset;
      std::memcpy(&offset, part.data(), sizeof offset);
      const size_t size = part.size() - write_header;
      if (offset > bytes_ || size > bytes_ - offset)
        return "write part " + std::to_string(i) + " covers " + range_text(offset, size) +
               ", outside the " + std::to_string(bytes_) + "-byte region";
    }
    return {};
  }

  void handle(std::span<zmq::message_t> parts) {
    if (parts.size() < 2) return; // a ROUTER always prefixes the routing id
    const int from = sender_rank(parts[0]);
    const auto body = parts.subspan(1);
    if (from >= 0 && !sender_proven(from, parts[0], body.front())) return;
    // Another socket naming an introduced rank is dropped before its frames are even read:
    // whatever it sends, garbage included, is no failure of this group.
    if (from >= 0 && !peers_[from]->connection.empty() &&
        peers_[from]->connection != parts[0].to_string_view())
      return drop_stale(from, parts[0]);
    tail t;
    std::string why = from < 0 ? "not a rank of this group" : validate(body, t);
    if (!why.empty()) {
      malformed(from, parts[0].to_string(), why);
      return;
    }
    auto& p = *peers_[from];
    if (p.connection.empty()) {
      // Its first hello introduces the rank (one of another shape too: that one fails connect).
      if (static_cast<kind>(t.kind) != kind::hello) return drop_stale(from, parts[0]);
      p.connection = parts[0].to_string_view();
    }
    switch (static_cast<kind>(t.kind)) {
    case kind::hello:
      if (t.a != static_cast<uint64_t>(ranks_) || t.b != bytes_ || t.c != flags_) {
        std::lock_guard lock(failure_mutex_);
        p.config_error = "group " + group_ + ": rank " + std::to_string(from) + " has " +
                         std::to_string(t.a) + " ranks, " + std::to_string(t.b) + " bytes and " +
                         std::to_string(t.c) + " flags, rank " + std::to_string(rank_) +
                         " expects " + std::to_string(ranks_) + ", " + std::to_string(bytes_) +
                         " and " + std::to_string(flags_) +
                         " (the ranks were configured differently)";
        return;
      }
      if (t.ack) p.acked.store(true, std::memory_order_release);
      p.heard.store(true, std::memory_order_release);
      return;
    case kind::leaving:
      p.left = true;
      record_failure("rank " + std::to_string(from) + " left the group");
      return;
    case kind::writes:
    case kind::add:
      for (size_t i = 0; i + 1 < body.size(); ++i) {
        uint64_t offset;
        std::memcpy(&offset, body[i].data(), sizeof offset);
        const size_t size = body[i].size() - write_header;
        if (size)
          std::memcpy(data_.get() + offset,
                      static_cast<const std::byte*>(body[i].data()) + write_header, size);
      }
      // The release half of acq_rel orders the copies above before the new flag value.
      if (static_cast<kind>(t.kind) == kind::add) apply_add(t.a, t.b);
      return;
    }
  }

  // Whether the connection of a message naming rank `from` proved that rank's instance; logs the
  // message it drops when not. Not a failure of the group: the rank itself may be fine.
  bool sender_proven(int from, const zmq::message_t& id, const zmq::message_t& first) {
    if (!keys_) return true;
    const auto proven = detail::proven_sender(first);
    if (proven && *proven == instances_[from]) return true;
    trust_rejections_.fetch_add(1);
    const std::string key = proven ? *proven : "(no key)";
    log_.limited(peer_lines_, log::level::warn, "identity mismatch: " + key,
                 "zmq rank fabric {} rank {}: dropped a message from routing id '{}' (rank {}, {}) "
                 "whose connection proved the key of {}",
                 group_, rank_, printable(id.to_string()), from, instances_[from], key);
    return false;
  }

  // A message naming rank `from` that did not come on the connection the rank introduced itself
  // on with its first hello. Every message of a rank travels its one DEALER, so its hello
  // precedes the rest; anything else naming the rank is another socket: typically the rank's
  // previous fabric, whose DEALER reconnected when this fabric re-bound the address of a group
  // re-formed under the same name. Its "leaving" or writes must not touch the new group, and are
  // not a failure of it either: counted and logged only.
  void drop_stale(int from, const zmq::message_t& id) {
    const std::string& introduced = peers_[from]->connection;
    stale_messages_.fetch_add(1);
    log_.limited(peer_lines_, log::level::warn, "stale connection of rank " + std::to_string(from),
                 "zmq rank fabric {} rank {}: dropped a message from routing id '{}': rank {} "
                 "introduced itself on {}",
                 group_, rank_, printable(id.to_string()), from,
                 introduced.empty() ? std::string("no connection yet")
                                    : "'" + printable(introduced) + "'");
  }

  void malformed(int from, const std::string& id, const std::string& why) {
    const std::string who = from >= 0
                                ? "rank " + std::to_string(from)
                                : "a sender outside the group (routing id '" + printable(id) + "')";
    const std::string text = who + " sent a malformed frame: " + why;
    const uint64_t count = malformed_frames_.fetch_add(1) + 1;
    log_.limited(peer_lines_, log::level::warn, "malformed frame from " + who,
                 "zmq rank fabric {} rank {}: dropped frame #{}: {}", group_, rank_, count, text);
    record_failure(text);
  }

  // The first failure stays: later ones are usually its consequences.
  void record_failure(const std::string& text) {
    std::lock_guard lock(failure_mutex_);
    if (failure_.empty()) failure_ = text;
  }

  std::string group_;
  std::vector<std::string> addresses_;
  std::shared_ptr<const cluster_keys> keys_;
  std::vector<std::string> instances_;
  std::unique_ptr<std::byte[], aligned_delete> data_;
  std::unique_ptr<flag_slot[]> slots_;
  zmq::context_t context_;
  std::unique_ptr<detail::zap_handler> zap_;            // receive thread only, once it runs
  zmq::socket_t router_;                                // receive thread only, once it runs
  std::unique_ptr<detail::handshake_watch> handshakes_; // receive thread only, once it runs
  std::string ipc_file_;
  std::vector<std::unique_ptr<peer>> peers_;
  std::mutex send_mutex_;
  bool left_ = false; // send_mutex_
  std::atomic<bool> connected_{false};
  mutable std::mutex failure_mutex_;
  std::string failure_; // failure_mutex_
  std::atomic<uint64_t> malformed_frames_{0};
  log::rate_limiter peer_lines_; // malformed frames: a peer (or a stranger) can send any number
  int stop_fd_ = -1;
  std::thread receiver_;
};

} // namespace

std::unique_ptr<rank_fabric> make_zmq_rank_fabric(const rank_fabric_options& options) {
  return std::make_unique<zmq_rank_fabric>(options);
}

} // namespace supernode::transport
