#include "services/loadgen/http_url.hpp"

#include <algorithm>
#include <stdexcept>

namespace supernode::services::loadgen {

http_url parse_http_url(const std::string& text) {
  std::string rest = text;
  if (const auto scheme_end = rest.find("://"); scheme_end != std::string::npos) {
    if (rest.substr(0, scheme_end) != "http")
      throw std::invalid_argument("only http:// URLs are supported, got '" + text + "'");
    rest = rest.substr(scheme_end + 3);
  }
  const auto slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  http_url url;
  if (slash != std::string::npos) url.base_path = rest.substr(slash);
  while (!url.base_path.empty() && url.base_path.back() == '/') url.base_path.pop_back();

  // "[::1]:8000" keeps its brackets out of the host name the resolver sees.
  std::string host = authority;
  if (!authority.empty() && authority.front() == '[') {
    const auto close = authority.find(']');
    if (close == std::string::npos) throw std::invalid_argument("bad IPv6 host in '" + text + "'");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') throw std::invalid_argument("bad URL '" + text + "'");
      url.port = authority.substr(close + 2);
    }
  } else if (const auto colon = authority.rfind(':'); colon != std::string::npos) {
    host = authority.substr(0, colon);
    url.port = authority.substr(colon + 1);
  }
  const bool numeric_port =
      !url.port.empty() && url.port.size() <= 5 &&
      std::all_of(url.port.begin(), url.port.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      std::stoi(url.port) <= 65535;
  if (host.empty() || !numeric_port)
    throw std::invalid_argument("URL needs http://HOST[:PORT], got '" + text + "'");
  url.host = host;
  return url;
}

} // namespace supernode::services::loadgen
