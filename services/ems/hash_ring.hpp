#pragma once
// The MP controller's placement (§4.4): a consistent-hash ring over MP servers. Each server
// owns many virtual nodes so that keys spread evenly and a join or leave moves only about 1/N
// of them. The hash is our own and byte-order explicit, so every process, compiler and restart
// places a key on the same server. Not thread-safe: the controller owns one ring.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::services::ems {

// FNV-1a with a splitmix64 finish: FNV alone clusters similar short strings, which would
// unbalance the ring; the finish spreads every input bit over the whole word.
uint64_t stable_hash(std::string_view bytes);
// Hash of (ns, key) with ns length-prefixed, so ("ab", "c") and ("a", "bc") differ.
uint64_t key_hash(std::string_view ns, std::string_view key);
// 16 lower-case hex digits: how a hash names a file, a version or a shared-memory object.
std::string hex16(uint64_t v);

class hash_ring {
public:
  // Throws std::invalid_argument when vnodes_per_server < 1.
  explicit hash_ring(int32_t vnodes_per_server = 64);

  // Both bump version(). Throw std::invalid_argument naming the server when it is already on
  // the ring (add), not on it (remove), or the name is empty (add).
  void add_server(const std::string& name);
  void remove_server(const std::string& name);

  // The server whose virtual node follows the key's hash clockwise. Throws std::runtime_error
  // "ring has no server" when empty.
  std::string owner(std::string_view ns, std::string_view key) const;
  // The first min(n, servers) distinct servers clockwise from the key: owner first, then the
  // replicas. Throws std::runtime_error "ring has no server" when empty.
  std::vector<std::string> owners(std::string_view ns, std::string_view key, size_t n) const;

  bool contains(const std::string& name) const;
  std::vector<std::string> servers() const; // sorted by name
  size_t size() const { return servers_.size(); }
  int32_t vnodes_per_server() const { return vnodes_; }
  // Bumped on every membership change, so clients can tell a stale copy of the ring.
  uint64_t version() const { return version_; }
  std::string describe() const;

private:
  struct vnode {
    uint64_t point = 0;
    uint32_t server = 0; // index into servers_
  };
  void rebuild();
  size_t first_at_or_after(uint64_t point) const;

  int32_t vnodes_;
  uint64_t version_ = 0;
  std::vector<std::string> servers_; // sorted, so the ring is independent of join order
  std::vector<vnode> ring_;          // sorted by (point, server name)
};

} // namespace supernode::services::ems
