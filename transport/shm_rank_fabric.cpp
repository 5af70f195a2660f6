// The rank fabric over shared memory: each rank owns a registered region
// ("<group>-rank<r>") and maps its peers' regions, so a write is a memcpy into the peer's memory
// and an add is an atomic on the peer's flag (waking it only when it sleeps).
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
        own_(shm_region::create(o.cluster, region_name(o.group, o.rank), o.bytes, o.flags)),
        peers_(static_cast<size_t>(o.ranks)) {}

  ~shm_rank_fabric() override { leave(); }

  bool connect(std::chrono::milliseconds timeout, const std::function<bool()>& give_up,
               std::string& why) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::string missing;
      for (int r = 0; r < ranks_; ++r) {
        if (r == rank_ || peers_[r]) continue;
        try {
          peers_[r] = shm_region::try_open(cluster_, region_name(group_, r));
        } catch (const shm_error&) {
          // Still being created: try again.
        }
        if (peers_[r] && (peers_[r]->size() != bytes_ || peers_[r]->flag_count() != flags_)) {
          why = "rank " + std::to_string(r) + "'s region " + peers_[r]->name() + " holds " +
                std::to_string(peers_[r]->size()) + " bytes and " +
                std::to_string(peers_[r]->flag_count()) + " flags, this rank expects " +
                std::to_string(bytes_) + " and " + std::to_string(flags_) +
                " (the ranks were configured differently)";
          return false;
        }
        if (!peers_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      if (missing.empty()) return true;
      if (give_up() || std::chrono::steady_clock::now() >= deadline) {
        why = "group " + group_ + ": rank " + std::to_string(rank_) + " cannot reach rank(s) " +
              missing + " (no shared-memory region from them)";
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

  void add(int to, size_t flag, uint64_t delta) override { region(to).add(flag, delta); }

  uint64_t load(size_t flag) const override { return own_.load(flag); }

  bool wait(size_t flag, uint64_t at_least, std::chrono::nanoseconds timeout) override {
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
  shm_region& region(int to) {
    check_peer(to);
    if (to == rank_) return own_;
    if (!peers_[to])
      throw std::logic_error("rank fabric: rank " + std::to_string(to) + " is not connected");
    return *peers_[to];
  }

  std::string cluster_, group_;
  shm_region own_;
  std::vector<std::optional<shm_region>> peers_;
};

} // namespace

std::unique_ptr<rank_fabric> make_shm_rank_fabric(const rank_fabric_options& options) {
  return std::make_unique<shm_rank_fabric>(options);
}

} // namespace supernode::transport
