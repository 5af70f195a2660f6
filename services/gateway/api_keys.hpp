#pragma once
// The gateway's API keys: `[gateway] api_keys_file` read into a table that holds only each key's
// digest (BLAKE2b-256, libsodium's crypto_generichash), its name for metrics and logs, and its
// limits. A presented key is hashed and compared with every entry in constant time, so neither
// the compare nor the number of entries tried tells an attacker how close a guess came.
//
// File format, one key per line, fields separated by blanks:
//   <key> [name=<label>] [max_concurrent=<n>] [tokens_per_minute=<n>]
// Blank lines and lines starting with '#' are skipped. A key has at least 16 characters; names
// are unique ([A-Za-z0-9_.-]+, as metric labels); an unnamed key is called key<line>. Limits of
// 0 or absent mean unlimited.

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace supernode::services::gateway {

using key_digest = std::array<unsigned char, 32>;

key_digest digest_of(std::string_view key);

struct api_key_limits {
  int64_t max_concurrent = 0;    // requests in flight at once; 0: unlimited
  int64_t tokens_per_minute = 0; // prompt + generated tokens in any 60 s window; 0: unlimited
};

struct api_key_entry {
  std::string name;
  key_digest digest{};
  api_key_limits limits;
};

class api_key_table {
public:
  // Reads `file`. Throws std::runtime_error naming the file and mode when group or others have
  // any permission on it, and "file:line: reason" for a malformed line. `config_key` names the
  // key that gave the file, in errors ([gateway] api_keys_file, admin_token_file).
  static api_key_table load(const std::filesystem::path& file,
                            const std::string& config_key = "api_keys_file");
  // The same rules on text already read; `source` names it in errors.
  static api_key_table parse(std::string_view text, const std::string& source);

  // The entry of `presented`, or nullptr. Hashes it once and compares every digest in full.
  const api_key_entry* find(std::string_view presented) const;

  const std::vector<api_key_entry>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }

private:
  std::vector<api_key_entry> entries_;
};

// The key of an `Authorization: Bearer <key>` value (scheme case-insensitive); nullopt for
// anything else.
std::optional<std::string_view> bearer_token(std::string_view authorization);

} // namespace supernode::services::gateway
