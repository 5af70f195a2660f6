#include "services/gateway/http_wire.hpp"

// clang-format off
#include <utility> // before asio: Boost 1.74's awaitable.hpp uses std::exchange
// clang-format on
#include <boost/beast/http.hpp>
#include <cstdio>

namespace supernode::services::gateway::wire {

namespace http = boost::beast::http;

namespace {

constexpr std::string_view server_name = "supernode";

boost::beast::string_view beast_view(std::string_view s) {
  return {s.data(), s.size()};
}

// Beast's serializer, drained into a string: header only, or the whole message.
template<class Body>
std::string serialize(const http::response<Body>& message, bool header_only) {
  http::response_serializer<Body> serializer{message};
  serializer.split(header_only);
  std::string out;
  boost::beast::error_code ec;
  const auto done = [&] {
    return header_only ? serializer.is_header_done() : serializer.is_done();
  };
  while (!ec && !done()) {
    serializer.next(ec, [&](boost::beast::error_code&, const auto& buffers) {
      for (auto b : boost::beast::buffers_range_ref(buffers))
        out.append(static_cast<const char*>(b.data()), b.size());
      serializer.consume(boost::beast::buffer_bytes(buffers));
    });
  }
  return out;
}

} // namespace

std::string response(unsigned status, unsigned version, bool keep_alive,
                     std::string_view content_type, std::string body,
                     const std::vector<std::pair<std::string, std::string>>& extra) {
  http::response<http::string_body> res;
  res.version(version);
  res.result(status);
  res.set(http::field::server, beast_view(server_name));
  res.set(http::field::content_type, beast_view(content_type));
  for (const auto& [name, value] : extra) res.set(beast_view(name), beast_view(value));
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  return serialize(res, false);
}

std::string event_stream_header(unsigned version, bool keep_alive, bool chunked) {
  http::response<http::empty_body> res{http::status::ok, version};
  res.set(http::field::server, beast_view(server_name));
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-cache");
  res.keep_alive(keep_alive);
  if (chunked) res.chunked(true);
  return serialize(res, true);
}

std::string event(std::string_view payload, bool chunked) {
  // A newline inside the payload would end the event early; SSE carries multi-line data as one
  // "data:" line per line, which clients join back with "\n".
  std::string data;
  data.reserve(payload.size() + 8);
  size_t begin = 0;
  for (;;) {
    const size_t end = payload.find('\n', begin);
    data += "data: ";
    data.append(payload.substr(begin, end - begin));
    data += '\n';
    if (end == std::string_view::npos) break;
    begin = end + 1;
  }
  data += '\n';
  if (!chunked) return data;
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out;
  out.reserve(data.size() + n + 2);
  out.append(size, n);
  out += data;
  out += "\r\n";
  return out;
}

} // namespace supernode::services::gateway::wire
