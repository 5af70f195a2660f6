// The rank fabric over shared memory: each rank owns a registered region
// ("<group>-rank<r>") and maps its peers' regions, so a write is a memcpy into the peer's memory
// and an add is an atomic on the peer's flag (waking it only when it sleeps).
//
// Connecting is a handshake, because a group re-formed under the same name (the same members
// after a break) re-creates regions of the same names. Without one, a rank that looks before a
// slower peer has dropped its old region maps that one, writes into memory nobody reads, and
// takes its closing for the peer leaving, which breaks the new formation too, over and over.
// So each region carries a nonce of its own (a fresh incarnation), and a rank that has mapped a
// peer's region writes its own region's nonce into it: "the region with this nonce has mapped
// yours". A rank is connected when every peer has acknowledged its region with the nonce of the
// very region it mapped from that peer. A mapped region that is closed, or whose owner
// acknowledged with another nonce, is a leftover, and the name is opened again.
#include "transport/membership.hpp"
#include "transport/rank_fabric.hpp"
#include "transport/shm_region.hpp"

#include <optional>
#include <thread>

namespace supernode::transport {

namespace {

std::string region_name(const std::string& group, int rank) {
  return group + "-rank" + std::to_string(rank);
}

class shm_rank_fabric final : public rank_fabric {
public:
  explicit shm_rank_fabric(const rank_fabric_options& o)
      : rank_fabric(o.rank, o.ranks, o.bytes, o.flags, o.log), cluster_(o.cluster), group_(o.group),
        own_(shm_region::create(o.cluster, region_name(o.group, o.rank), o.bytes, region_flags())),
        // Never 0 (which reads "not written yet"), and never the nonce of this rank's region
        // before: it grows with every call.
        nonce_(new_incarnation()), peers_(static_cast<size_t>(o.ranks)) {
    own_.publish(nonce_flag(), nonce_);
  }

  ~shm_rank_fabric() override { leave(); }

  bool connect(std::chrono::milliseconds timeout, const std::function<bool()>& give_up,
               std::string& why) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::string missing;
      for (int r = 0; r < ranks_; ++r) {
        if (r == rank_) continue;
        if (!look_at(r, why)) return false;
        if (!handshaken(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      if (missing.empty()) return true;
      if (give_up() || std::chrono::steady_clock::now() >= deadline) {
        why = "group " + group_ + ": rank " + std::to_string(rank_) + " cannot reach rank(s) " +
              missing + " (no shared-memory region from them that has mapped this rank's)";
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::byte* local() override { return own_.data(); }

  void write(int to, size_t offset, std::span<const std::byte> data) override {
    region(to).write(offset, data);
    if (to != rank_) bytes_sent_ += data.size();
  }

  void add(int to, size_t flag, uint64_t delta) override {
    check_flag(flag);
    region(to).add(flag, delta);
  }

  uint64_t load(size_t flag) const override {
    check_flag(flag);
    return own_.load(flag);
  }

  bool wait(size_t flag, uint64_t at_least, std::chrono::nanoseconds timeout) override {
    check_flag(flag);
    // A short spin: ranks can outnumber cores, and a spinning waiter then steals the core its
    // writer needs.
    return own_.wait(flag, at_least, timeout, std::chrono::microseconds(20));
  }

  std::string peer_failure() const override {
    for (int r = 0; r < ranks_; ++r) {
      if (r == rank_ || !peers_[r]) continue;
      if (peers_[r]->closed()) return "rank " + std::to_string(r) + " left the group";
      if (!peers_[r]->owner_alive())
        return "rank " + std::to_string(r) + " (pid " + std::to_string(peers_[r]->owner_pid()) +
               ") is gone";
    }
    return {};
  }

  void leave() override { own_.mark_closed(); }

private:
  // After the caller's flags: this region's nonce, then one acknowledgement slot per rank.
  size_t region_flags() const { return flags_ + 1 + static_cast<size_t>(ranks_); }
  size_t nonce_flag() const { return flags_; }
  size_t ack_flag(int from) const { return flags_ + 1 + static_cast<size_t>(from); }

  // Maps rank r's region if it is not mapped or the mapped one is a leftover, and acknowledges
  // the mapped one once its nonce is there. False (with `why`) when the peer is configured
  // differently.
  bool look_at(int r, std::string& why) {
    auto& peer = peers_[r];
    const uint64_t acked_by_peer = own_.load(ack_flag(r));
    if (peer && (peer->closed() || (acked_by_peer != 0 && acked_by_peer != peer_nonce(r))))
      peer.reset();
    if (!peer) {
      try {
        peer = shm_region::try_open(cluster_, region_name(group_, r));
      } catch (const shm_error&) {
        // Still being created: try again.
      }
      if (!peer) return true;
      if (peer->size() != bytes_ || peer->flag_count() != region_flags()) {
        why = "rank " + std::to_string(r) + "'s region " + peer->name() + " holds " +
              std::to_string(peer->size()) + " bytes and " + std::to_string(peer->flag_count()) +
              " flags, this rank expects " + std::to_string(bytes_) + " and " +
              std::to_string(region_flags()) + " (the ranks were configured differently)";
        peer.reset();
        return false;
      }
    }
    // Once its owner has published the nonce (its flags are set up by then), and only once.
    if (peer_nonce(r) != 0 && peer->load(ack_flag(rank_)) != nonce_)
      peer->publish(ack_flag(rank_), nonce_);
    return true;
  }

  uint64_t peer_nonce(int r) const { return peers_[r]->load(nonce_flag()); }

  bool handshaken(int r) const {
    return peers_[r] && peer_nonce(r) != 0 && own_.load(ack_flag(r)) == peer_nonce(r);
  }

  shm_region& region(int to) {
    check_peer(to);
    if (to == rank_) return own_;
    if (!peers_[to])
      throw std::logic_error("rank fabric: rank " + std::to_string(to) + " is not connected");
    return *peers_[to];
  }

  std::string cluster_, group_;
  shm_region own_;
  uint64_t nonce_;
  std::vector<std::optional<shm_region>> peers_;
};

} // namespace

std::unique_ptr<rank_fabric> make_shm_rank_fabric(const rank_fabric_options& options) {
  return std::make_unique<shm_rank_fabric>(options);
}

} // namespace supernode::transport
