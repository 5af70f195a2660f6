#include "services/ems/hash_ring.hpp"

#include "transport/checksum.hpp"

#include <algorithm>
#include <stdexcept>

namespace supernode::services::ems {

namespace {

uint64_t splitmix_finish(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Little-endian whatever the host is, so the hash is the same everywhere.
uint64_t fnv_u64(uint64_t value, uint64_t h) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return transport::fnv1a(bytes, sizeof bytes, h);
}

[[noreturn]] void throw_empty() {
  throw std::runtime_error("ring has no server");
}

} // namespace

uint64_t stable_hash(std::string_view bytes) {
  return splitmix_finish(transport::fnv1a(bytes.data(), bytes.size()));
}

std::string hex16(uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[i] = digits[v & 0xf];
  return s;
}

uint64_t key_hash(std::string_view ns, std::string_view key) {
  uint64_t h = fnv_u64(ns.size(), 0xcbf29ce484222325ull);
  h = transport::fnv1a(ns.data(), ns.size(), h);
  h = transport::fnv1a(key.data(), key.size(), h);
  return splitmix_finish(h);
}

hash_ring::hash_ring(int32_t vnodes_per_server) : vnodes_(vnodes_per_server) {
  if (vnodes_per_server < 1)
    throw std::invalid_argument("hash_ring: vnodes_per_server must be >= 1, got " +
                                std::to_string(vnodes_per_server));
}

void hash_ring::add_server(const std::string& name) {
  if (name.empty()) throw std::invalid_argument("hash_ring: server name is empty");
  auto it = std::lower_bound(servers_.begin(), servers_.end(), name);
  if (it != servers_.end() && *it == name)
    throw std::invalid_argument("hash_ring: server '" + name + "' is already on the ring");
  servers_.insert(it, name);
  rebuild();
  ++version_;
}

void hash_ring::remove_server(const std::string& name) {
  auto it = std::lower_bound(servers_.begin(), servers_.end(), name);
  if (it == servers_.end() || *it != name)
    throw std::invalid_argument("hash_ring: server '" + name + "' is not on the ring");
  servers_.erase(it);
  rebuild();
  ++version_;
}

void hash_ring::rebuild() {
  ring_.clear();
  ring_.reserve(servers_.size() * static_cast<size_t>(vnodes_));
  for (uint32_t s = 0; s < servers_.size(); ++s)
    for (int32_t v = 0; v < vnodes_; ++v)
      ring_.push_back({stable_hash(servers_[s] + "#" + std::to_string(v)), s});
  // servers_ is sorted, so breaking point ties by index is breaking them by name: a collision
  // resolves the same way on every controller.
  std::sort(ring_.begin(), ring_.end(), [](const vnode& a, const vnode& b) {
    return a.point != b.point ? a.point < b.point : a.server < b.server;
  });
}

size_t hash_ring::first_at_or_after(uint64_t point) const {
  auto it = std::lower_bound(ring_.begin(), ring_.end(), point,
                             [](const vnode& v, uint64_t p) { return v.point < p; });
  return it == ring_.end() ? 0 : static_cast<size_t>(it - ring_.begin());
}

std::string hash_ring::owner(std::string_view ns, std::string_view key) const {
  if (ring_.empty()) throw_empty();
  return servers_[ring_[first_at_or_after(key_hash(ns, key))].server];
}

std::vector<std::string> hash_ring::owners(std::string_view ns, std::string_view key,
                                           size_t n) const {
  if (ring_.empty()) throw_empty();
  const size_t want = std::min(n, servers_.size());
  std::vector<std::string> out;
  std::vector<bool> taken(servers_.size(), false);
  size_t i = first_at_or_after(key_hash(ns, key));
  for (size_t step = 0; step < ring_.size() && out.size() < want; ++step) {
    const uint32_t s = ring_[(i + step) % ring_.size()].server;
    if (taken[s]) continue;
    taken[s] = true;
    out.push_back(servers_[s]);
  }
  return out;
}

bool hash_ring::contains(const std::string& name) const {
  return std::binary_search(servers_.begin(), servers_.end(), name);
}

std::vector<std::string> hash_ring::servers() const {
  return servers_;
}

std::string hash_ring::describe() const {
  std::string s = "hash_ring v" + std::to_string(version_) + ": " +
                  std::to_string(servers_.size()) + " servers x " + std::to_string(vnodes_) +
                  " vnodes [";
  for (size_t i = 0; i < servers_.size(); ++i) s += (i ? ", " : "") + servers_[i];
  return s + "]";
}

} // namespace supernode::services::ems
