#pragma once
// The cluster's CurveZMQ keys: one key pair per role instance, in one folder (0700, files 0600).
// A peer is who its key says: a plane's ZAP handler maps the public key a connection proved
// into the instance it belongs to, and a message is that instance's whatever name it claims.
// Per instance rather than per cluster or per process kind, because the identity the receivers
// check is the instance (a decode instance must not speak for another decode instance), and a
// process holds only the secrets of the instances it hosts.
//
//   <dir>/<instance>.secret   public = "<z85>"  secret = "<z85>"   (the instance's own)
//   <dir>/<instance>.public   public = "<z85>"                      (what its peers read)
//
// Z85 is ZeroMQ's text form of a 32-byte Curve25519 key (40 characters).

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::transport {

struct curve_keypair {
  std::string public_key, secret_key; // Z85, 40 characters each
};

// A fresh key pair (zmq_curve_keypair); throws when libzmq was built without CURVE.
curve_keypair make_curve_keypair();

// The Z85 text of a 32-byte binary key (as a ZAP request carries it), and back; nullopt when the
// input has the wrong size or alphabet.
std::optional<std::string> z85_of_binary_key(std::string_view binary32);
std::optional<std::string> binary_of_z85_key(std::string_view z85);

class cluster_keys {
public:
  explicit cluster_keys(std::filesystem::path dir);
  const std::filesystem::path& dir() const { return dir_; }

  // Makes a key pair for every instance that has none (the folder too, 0700). Processes that
  // start together and race converge on one pair per instance. Returns the names it made.
  std::vector<std::string> ensure(const std::vector<std::string>& instances) const;

  // The instance's own pair; throws naming the file when it is missing, unreadable or malformed
  // (`supernode cluster keys` makes them).
  curve_keypair own(const std::string& instance) const;
  // An instance's public key (Z85), read from its .public file; nullopt when there is none.
  std::optional<std::string> public_key(const std::string& instance) const;
  // The instance whose public key (Z85) this is; nullopt for a key of no instance. The folder
  // is read again whenever it changed since the last read (its mtime: a pair written by an
  // instance added at run time, or replaced), so a flood of unknown keys costs one stat each.
  std::optional<std::string> owner_of(std::string_view z85_public) const;

private:
  void rescan_locked() const;

  std::filesystem::path dir_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::string, std::less<>> owners_; // public (Z85) -> instance
  mutable std::optional<std::filesystem::file_time_type> scanned_; // the folder's mtime then
  mutable std::chrono::steady_clock::time_point last_scan_{};
};

} // namespace supernode::transport
