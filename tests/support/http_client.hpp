#pragma once
// HTTP for tests: services/loadgen's blocking request to a server on this host (one request per
// connection, a deadline on the whole of it, an SSE stream read until the server ends it), and
// its SSE parser for streamed answers.

#include "services/loadgen/http_client.hpp"
#include "services/loadgen/sse_parser.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace supernode::testing {

using http_reply = services::loadgen::http_response;

inline http_reply http_call(uint16_t port, const std::string& method, const std::string& target,
                            const std::string& body = "",
                            std::chrono::seconds timeout = std::chrono::seconds(120)) {
  services::loadgen::http_url url;
  url.host = "127.0.0.1";
  url.port = std::to_string(port);
  return services::loadgen::http_request(url, method, target, body, timeout);
}

// The data fields of a Server-Sent Events body's events, in order.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<services::loadgen::sse_event> events;
  services::loadgen::sse_parser().feed(body, events);
  std::vector<std::string> data;
  for (auto& e : events) data.push_back(std::move(e.data));
  return data;
}

} // namespace supernode::testing
