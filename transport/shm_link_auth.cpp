#include "transport/shm_link_auth.hpp"

#include <cstring>
#include <sodium.h>
#include <stdexcept>

namespace supernode::transport {

namespace {

static_assert(crypto_box_BEFORENMBYTES == crypto_auth_KEYBYTES);
static_assert(crypto_auth_BYTES == link_mac_bytes);
static_assert(crypto_box_PUBLICKEYBYTES == 32 && crypto_box_SECRETKEYBYTES == 32);

void init_sodium() {
  static const int ready = sodium_init();
  if (ready < 0) throw std::runtime_error("libsodium failed to initialise");
}

// The claim as bytes: strings length-prefixed, so no two claims encode alike.
std::string encode(const link_claim& c) {
  std::string out;
  auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  auto put_text = [&](std::string_view s) {
    const auto n = static_cast<uint32_t>(s.size());
    put(&n, sizeof n);
    put(s.data(), s.size());
  };
  put_text("supernode shm ring v1");
  put_text(c.cluster);
  put_text(c.from);
  put_text(c.to);
  put_text(c.ring);
  put(c.inbox_nonce.data(), c.inbox_nonce.size());
  put(c.slot_challenge.data(), c.slot_challenge.size());
  put(&c.slot, sizeof c.slot);
  put(&c.creator_pid, sizeof c.creator_pid);
  put(&c.creator_start, sizeof c.creator_start);
  return out;
}

std::optional<std::string> binary_key(const std::optional<std::string>& z85) {
  return z85 ? binary_of_z85_key(*z85) : std::nullopt;
}

} // namespace

link_nonce random_link_nonce() {
  init_sodium();
  link_nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

shm_link_auth::shm_link_auth(std::shared_ptr<const cluster_keys> keys, std::string self)
    : keys_(std::move(keys)), self_(std::move(self)) {
  init_sodium();
  if (!keys_) throw std::invalid_argument("shm_link_auth: no cluster keys");
  const auto pair = keys_->own(self_);
  const auto secret = binary_of_z85_key(pair.secret_key);
  if (!secret) throw std::runtime_error("malformed secret key of " + self_);
  std::memcpy(secret_.data(), secret->data(), secret_.size());
}

shm_link_auth::~shm_link_auth() {
  sodium_memzero(secret_.data(), secret_.size());
  for (auto& [peer, key] : shared_) sodium_memzero(key.data(), key.size());
}

std::optional<shm_link_auth::key_bytes> shm_link_auth::shared_key(const std::string& peer,
                                                                  std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = shared_.find(peer); it != shared_.end()) return it->second;
  }
  const auto pub = binary_key(keys_->public_key(peer));
  if (!pub) {
    why = "no public key for " + peer + " in " + keys_->dir().string();
    return std::nullopt;
  }
  key_bytes key;
  if (crypto_box_beforenm(key.data(), reinterpret_cast<const unsigned char*>(pub->data()),
                          secret_.data()) != 0) {
    why = "the public key of " + peer + " is not a usable Curve25519 key";
    return std::nullopt;
  }
  std::lock_guard lock(mutex_);
  shared_[peer] = key;
  return key;
}

void shm_link_auth::forget(const std::string& peer) {
  std::lock_guard lock(mutex_);
  if (auto it = shared_.find(peer); it != shared_.end()) {
    sodium_memzero(it->second.data(), it->second.size());
    shared_.erase(it);
  }
}

std::optional<link_mac> shm_link_auth::sign(const link_claim& claim, std::string& why) {
  const auto key = shared_key(std::string(claim.to), why);
  if (!key) return std::nullopt;
  const auto bytes = encode(claim);
  link_mac mac;
  crypto_auth(reinterpret_cast<unsigned char*>(mac.data()),
              reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), key->data());
  return mac;
}

bool shm_link_auth::verify(const link_claim& claim, std::span<const std::byte, link_mac_bytes> mac,
                           std::string& why) {
  const std::string from(claim.from);
  const auto key = shared_key(from, why);
  if (!key) return false;
  const auto bytes = encode(claim);
  if (crypto_auth_verify(reinterpret_cast<const unsigned char*>(mac.data()),
                         reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                         key->data()) == 0)
    return true;
  // The peer's keys may have been made again since we derived the shared one: read them anew
  // next time (a flood of bad rings costs one file read each, bounded by the slots).
  forget(from);
  why = "its MAC does not verify with " + from + "'s public key";
  return false;
}

} // namespace supernode::transport
