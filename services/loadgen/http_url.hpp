#pragma once
// The server address given as --url: plain http only (the benchmark talks to a server on the
// same network; TLS would only measure the TLS library).

#include <string>

namespace supernode::services::loadgen {

struct http_url {
  std::string host;
  std::string port = "80";
  // Any path after the authority, without a trailing '/', so "/v1/..." can be appended.
  std::string base_path;

  std::string host_header() const {
    const std::string h = host.find(':') == std::string::npos ? host : "[" + host + "]";
    return port == "80" ? h : h + ":" + port;
  }
  std::string target(const std::string& path) const { return base_path + path; }
};

// "http://127.0.0.1:8000", "http://host/prefix/", "localhost:8000"; throws
// std::invalid_argument for other schemes or an empty host.
http_url parse_http_url(const std::string& text);

} // namespace supernode::services::loadgen
