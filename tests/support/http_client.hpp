#pragma once
// A blocking HTTP/1.1 client for tests (Boost.Beast): one request per connection, a deadline on
// every operation, the whole response read (an SSE stream ends when the server ends it).

#include "services/beast.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace supernode::testing {

struct http_reply {
  unsigned status = 0;
  std::string content_type;
  std::string body;
  std::string error; // transport failure, if any
};

inline http_reply http_call(uint16_t port, const std::string& method, const std::string& target,
                            const std::string& body = "",
                            std::chrono::seconds timeout = std::chrono::seconds(120)) {
  namespace beast = boost::beast;
  namespace http = beast::http;
  namespace net = boost::asio;
  http_reply out;
  try {
    net::io_context io;
    beast::tcp_stream stream(io);
    stream.expires_after(timeout);
    stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
    http::request<http::string_body> req{method == "GET" ? http::verb::get : http::verb::post,
                                         target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (method != "GET") {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(size_t{256} << 20);
    http::read(stream, buffer, parser);
    auto& res = parser.get();
    out.status = res.result_int();
    out.content_type = std::string(res[http::field::content_type]);
    out.body = res.body();
    beast::error_code ec;
    stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

// The data fields of a Server-Sent Events body, in order.
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> events;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) == 0) events.push_back(event.substr(6));
    pos = end + 2;
  }
  return events;
}

} // namespace supernode::testing
