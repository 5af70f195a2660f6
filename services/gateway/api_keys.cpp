#include "services/gateway/api_keys.hpp"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <set>
#include <sodium.h>
#include <sstream>
#include <stdexcept>
#include <sys/stat.h>

namespace supernode::services::gateway {

namespace {

constexpr size_t min_key_length = 16;

void init_sodium() {
  static const bool ready = sodium_init() >= 0;
  if (!ready) throw std::runtime_error("api keys: libsodium failed to initialise");
}

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return false;
  return true;
}

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    size_t end = i;
    while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
    if (end > i) out.push_back(line.substr(i, end - i));
    i = end;
  }
  return out;
}

struct line_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int64_t limit_value(std::string_view field, std::string_view value) {
  int64_t out = 0;
  auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), out);
  if (value.empty() || ec != std::errc() || p != value.data() + value.size() || out < 0)
    throw line_error(std::string(field) + " must be a non-negative integer, got '" +
                     std::string(value) + "'");
  return out;
}

api_key_entry parse_line(const std::vector<std::string_view>& fields, size_t line_number) {
  api_key_entry entry;
  const std::string_view key = fields.front();
  if (key.find('=') != std::string_view::npos)
    throw line_error("the line must start with the key, not a field");
  if (key.size() < min_key_length)
    throw line_error("a key has at least " + std::to_string(min_key_length) + " characters");
  entry.digest = digest_of(key);
  entry.name = "key" + std::to_string(line_number);
  std::set<std::string_view> seen;
  for (size_t i = 1; i < fields.size(); ++i) {
    const auto eq = fields[i].find('=');
    if (eq == std::string_view::npos)
      throw line_error("expected name=, max_concurrent= or tokens_per_minute=, got '" +
                       std::string(fields[i]) + "'");
    const auto field = fields[i].substr(0, eq), value = fields[i].substr(eq + 1);
    if (!seen.insert(field).second) throw line_error(std::string(field) + " given twice");
    if (field == "name") {
      if (!valid_name(value))
        throw line_error("name must be letters, digits, '_', '.' or '-', got '" +
                         std::string(value) + "'");
      entry.name = std::string(value);
    } else if (field == "max_concurrent") {
      entry.limits.max_concurrent = limit_value(field, value);
    } else if (field == "tokens_per_minute") {
      entry.limits.tokens_per_minute = limit_value(field, value);
    } else {
      throw line_error("unknown field '" + std::string(field) +
                       "' (name, max_concurrent, tokens_per_minute)");
    }
  }
  return entry;
}

} // namespace

key_digest digest_of(std::string_view key) {
  init_sodium();
  key_digest out;
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(key.data()),
                     key.size(), nullptr, 0);
  return out;
}

api_key_table api_key_table::load(const std::filesystem::path& file,
                                  const std::string& config_key) {
  struct stat info {};
  if (::stat(file.c_str(), &info) != 0)
    throw std::runtime_error("[gateway] " + config_key + " " + file.string() + ": cannot read it");
  if ((info.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
    throw std::runtime_error("[gateway] " + config_key + " " + file.string() + " has mode " + mode +
                             ": group and others must have no access to it (chmod 600 " +
                             file.string() + ")");
  }
  std::ifstream in(file);
  if (!in)
    throw std::runtime_error("[gateway] " + config_key + " " + file.string() + ": cannot read it");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), file.string());
}

api_key_table api_key_table::parse(std::string_view text, const std::string& source) {
  api_key_table table;
  std::set<std::string> names;
  std::set<key_digest> digests;
  size_t line_number = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    const auto fields = fields_of(line);
    if (fields.empty() || fields.front().front() == '#') continue;
    try {
      auto entry = parse_line(fields, line_number);
      if (!names.insert(entry.name).second)
        throw line_error("the name '" + entry.name + "' is taken by an earlier key");
      if (!digests.insert(entry.digest).second)
        throw line_error("the same key is listed on an earlier line");
      table.entries_.push_back(std::move(entry));
    } catch (const line_error& e) {
      throw std::runtime_error(source + ":" + std::to_string(line_number) + ": " + e.what());
    }
  }
  return table;
}

const api_key_entry* api_key_table::find(std::string_view presented) const {
  const key_digest digest = digest_of(presented);
  const api_key_entry* match = nullptr;
  for (const auto& entry : entries_) {
    // sodium_memcmp takes the same time whatever the bytes, and every entry is compared: the
    // time depends on the number of keys only.
    const bool equal = sodium_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0;
    match = equal ? &entry : match;
  }
  return match;
}

std::optional<std::string_view> bearer_token(std::string_view authorization) {
  constexpr std::string_view scheme = "bearer ";
  if (authorization.size() <= scheme.size()) return std::nullopt;
  for (size_t i = 0; i < scheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != scheme[i])
      return std::nullopt;
  auto key = authorization.substr(scheme.size());
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.remove_suffix(1);
  if (key.empty()) return std::nullopt;
  return key;
}

} // namespace supernode::services::gateway
