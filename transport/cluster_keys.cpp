#include "transport/cluster_keys.hpp"

#include "transport/private_files.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <zmq.h>

namespace supernode::transport {

namespace {

namespace fs = std::filesystem;
constexpr size_t z85_key_chars = 40, binary_key_bytes = 32;

bool is_z85_key(std::string_view text) {
  return text.size() == z85_key_chars && binary_of_z85_key(text).has_value();
}

// The value of `name = "..."` in a key file's text; "" when absent.
std::string field(const std::string& text, std::string_view name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    auto key = line.substr(0, eq);
    key.erase(key.find_last_not_of(" \t") + 1);
    key.erase(0, key.find_first_not_of(" \t"));
    if (key != name) continue;
    const auto open = line.find('"', eq), close = line.rfind('"');
    if (open == std::string::npos || close <= open) return "";
    return line.substr(open + 1, close - open - 1);
  }
  return "";
}

std::optional<std::string> read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

fs::path secret_file(const fs::path& dir, const std::string& instance) {
  return dir / (instance + ".secret");
}
fs::path public_file(const fs::path& dir, const std::string& instance) {
  return dir / (instance + ".public");
}

} // namespace

curve_keypair make_curve_keypair() {
  char pub[z85_key_chars + 1], sec[z85_key_chars + 1];
  if (zmq_curve_keypair(pub, sec) != 0)
    throw std::runtime_error(std::string("cannot make a CURVE key pair: ") +
                             zmq_strerror(zmq_errno()));
  return {pub, sec};
}

std::optional<std::string> z85_of_binary_key(std::string_view binary32) {
  if (binary32.size() != binary_key_bytes) return std::nullopt;
  char text[z85_key_chars + 1];
  if (!zmq_z85_encode(text, reinterpret_cast<const uint8_t*>(binary32.data()), binary_key_bytes))
    return std::nullopt;
  return std::string(text, z85_key_chars);
}

std::optional<std::string> binary_of_z85_key(std::string_view z85) {
  if (z85.size() != z85_key_chars) return std::nullopt;
  const std::string text(z85); // zmq_z85_decode wants a terminated string
  std::string binary(binary_key_bytes, '\0');
  if (!zmq_z85_decode(reinterpret_cast<uint8_t*>(binary.data()), text.c_str())) return std::nullopt;
  return binary;
}

cluster_keys::cluster_keys(fs::path dir) : dir_(std::move(dir)) {}

std::vector<std::string> cluster_keys::ensure(const std::vector<std::string>& instances) const {
  ensure_private_dir(dir_);
  std::vector<std::string> made;
  auto write_public = [&](const std::string& name, const std::string& key) {
    write_private_file(public_file(dir_, name), "public = \"" + key + "\"\n");
  };
  for (const auto& name : instances) {
    if (!fs::exists(secret_file(dir_, name))) {
      const auto pair = make_curve_keypair();
      // The secret first: whoever wins it writes the public half of the same pair.
      if (create_private_file(secret_file(dir_, name), "public = \"" + pair.public_key +
                                                           "\"\nsecret = \"" + pair.secret_key +
                                                           "\"\n")) {
        write_public(name, pair.public_key);
        made.push_back(name);
        continue;
      }
    }
    // Another process won the secret and may not have written its public half yet: write it
    // from the secret (the same bytes), or this process could look for that key in vain.
    if (!fs::exists(public_file(dir_, name))) write_public(name, own(name).public_key);
  }
  return made;
}

curve_keypair cluster_keys::own(const std::string& instance) const {
  const auto file = secret_file(dir_, instance);
  const auto text = read_file(file);
  if (!text)
    throw std::runtime_error("no key for " + instance + ": cannot read " + file.string() +
                             " (make the cluster's keys with `supernode cluster keys --config "
                             "FILE`)");
  curve_keypair pair{field(*text, "public"), field(*text, "secret")};
  if (!is_z85_key(pair.public_key) || !is_z85_key(pair.secret_key))
    throw std::runtime_error("malformed key file " + file.string() +
                             ": expected public = \"<40 Z85 characters>\" and secret = \"...\"");
  return pair;
}

std::optional<std::string> cluster_keys::public_key(const std::string& instance) const {
  const auto text = read_file(public_file(dir_, instance));
  if (!text) return std::nullopt;
  auto key = field(*text, "public");
  if (!is_z85_key(key)) return std::nullopt;
  return key;
}

std::optional<std::string> cluster_keys::owner_of(std::string_view z85_public) const {
  std::lock_guard lock(mutex_);
  // A key written since the last look changes the folder's mtime: one stat per unknown key, and
  // a scan only when the folder changed, so a flood of unknown keys costs no scans, and a pair
  // made a moment ago (a process joining) is found at once.
  // Folder times tick coarsely (a few ms): within a second of a change, a scan may have come in
  // the same tick as a later write, so the folder is read again then, at most every 20 ms.
  std::error_code ec;
  const auto changed = std::filesystem::last_write_time(dir_, ec);
  const auto now = std::chrono::steady_clock::now();
  const bool recent =
      std::filesystem::file_time_type::clock::now() - changed < std::chrono::seconds(1);
  if (!ec && (!scanned_ || changed != *scanned_ ||
              (recent && now - last_scan_ >= std::chrono::milliseconds(20)))) {
    scanned_ = changed;
    last_scan_ = now;
    rescan_locked();
  }
  if (auto it = owners_.find(z85_public); it != owners_.end()) return it->second;
  return std::nullopt;
}

void cluster_keys::rescan_locked() const {
  // From scratch: a key replaced or removed since the last scan names nobody any more.
  owners_.clear();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".public") continue;
    const auto instance = entry.path().stem().string();
    if (auto key = public_key(instance)) owners_[*key] = instance;
  }
}

} // namespace supernode::transport
