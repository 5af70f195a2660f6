#pragma once
// Who created a shm ring. A ring's name and its inbox slot say which peer sent it, but any process
// of the cluster's user can create a segment, so a receiver believes the claim only when the
// ring's header carries a MAC that only the claimed sender could compute: the key is the
// Curve25519 shared secret of the sender's secret and the receiver's public key
// (crypto_box_beforenm: both ends derive it, each from its own secret and the other's public
// key), the MAC is HMAC-SHA512-256 (crypto_auth) over what the creator claims: cluster, sender,
// receiver, ring name, the receiver's inbox nonce (its incarnation), the slot's challenge (fresh
// each time the receiver frees the slot, so a MAC seen once cannot be replayed into a later
// slot), and the creator's pid and start time (the ring dies with that process).

#include "transport/cluster_keys.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace supernode::transport {

inline constexpr size_t link_nonce_bytes = 32, link_mac_bytes = 32;
using link_nonce = std::array<std::byte, link_nonce_bytes>;
using link_mac = std::array<std::byte, link_mac_bytes>;

// 32 random bytes from the kernel's generator (randombytes_buf).
link_nonce random_link_nonce();

// What a ring's creator claims; the MAC covers every field.
struct link_claim {
  std::string_view cluster, from, to, ring;
  std::span<const std::byte, link_nonce_bytes> inbox_nonce, slot_challenge;
  uint32_t slot = 0;
  int32_t creator_pid = 0;
  uint64_t creator_start = 0;
};

class shm_link_auth {
public:
  // Reads `self`'s key pair from `keys` (throws naming the file when it is missing or bad).
  shm_link_auth(std::shared_ptr<const cluster_keys> keys, std::string self);
  ~shm_link_auth();
  shm_link_auth(const shm_link_auth&) = delete;
  shm_link_auth& operator=(const shm_link_auth&) = delete;

  // The MAC this instance (claim.from) writes into a ring for claim.to; nullopt with the reason
  // when claim.to has no usable public key. Thread-safe.
  std::optional<link_mac> sign(const link_claim& claim, std::string& why);
  // Whether `mac` proves that claim.from, holding its secret, made this claim to this instance
  // (claim.to); false with the reason otherwise. Constant-time in the MAC. Thread-safe.
  bool verify(const link_claim& claim, std::span<const std::byte, link_mac_bytes> mac,
              std::string& why);

private:
  using key_bytes = std::array<unsigned char, 32>;
  // The key shared with `peer` (derived once, then cached); nullopt with the reason.
  std::optional<key_bytes> shared_key(const std::string& peer, std::string& why);
  void forget(const std::string& peer);

  std::shared_ptr<const cluster_keys> keys_;
  std::string self_;
  key_bytes secret_{};
  std::mutex mutex_;
  std::map<std::string, key_bytes, std::less<>> shared_;
};

} // namespace supernode::transport
