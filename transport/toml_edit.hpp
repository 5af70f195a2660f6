#pragma once
// Editing a cluster config's text the way a person would: one `key = value` line set in one
// table, comments and everything else left as written. For tools and tests that derive a
// config from one of configs/ (a bench's cluster, a test's run folder). Header-only, so test
// helpers that link no library can use it.

#include <string>

namespace supernode::transport {

// Sets `key = value` in `[table]` (replacing the key's line, or adding it under the header; the
// table is appended when missing). `value` is TOML as written ("\"vpc\"", "16", "true").
inline std::string set_toml_key(std::string text, const std::string& table, const std::string& key,
                                const std::string& value) {
  const std::string header = "[" + table + "]";
  size_t at = text.find("\n" + header + "\n");
  if (text.rfind(header + "\n", 0) == 0)
    at = 0;
  else if (at != std::string::npos)
    at += 1;
  if (at == std::string::npos) return text + "\n" + header + "\n" + key + " = " + value + "\n";
  const size_t body = at + header.size() + 1;
  size_t end = text.find("\n[", body);
  if (end == std::string::npos) end = text.size();
  for (size_t line = body; line < end;) {
    size_t nl = text.find('\n', line);
    if (nl == std::string::npos) nl = text.size();
    if (text.compare(line, key.size() + 1, key + " ") == 0 ||
        text.compare(line, key.size() + 1, key + "=") == 0)
      return text.replace(line, nl - line, key + " = " + value);
    line = nl + 1;
  }
  return text.insert(body, key + " = " + value + "\n");
}

} // namespace supernode::transport
