#include "services/loadgen/http_client.hpp"

#include "services/beast.hpp"
#include "services/loadgen/completion_stream.hpp"

#include <cstdio>
#include <exception>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace supernode::services::loadgen {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

namespace {

constexpr size_t max_error_body = 4096;

double seconds_since(steady_time origin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
}

std::string describe(const beast::error_code& ec, std::chrono::steady_clock::duration timeout) {
  if (ec != beast::error::timeout) return ec.message();
  char buf[64];
  std::snprintf(buf, sizeof buf, "timed out after %g s",
                std::chrono::duration<double>(timeout).count());
  return buf;
}

// {"error": {"message": ...}} as OpenAI-compatible servers send it, else the raw body.
std::string error_message_of(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_object() && e->contains("message") && (*e)["message"].is_string())
        return (*e)["message"].get<std::string>();
      if (e->is_string()) return e->get<std::string>();
    }
    if (auto m = j.find("message"); m != j.end() && m->is_string()) return m->get<std::string>();
  }
  return body.size() > 200 ? body.substr(0, 200) + "..." : body;
}

net::awaitable<void> stream_completion_or_throw(const completion_call& call,
                                                const planned_request& request,
                                                request_outcome& out) {
  beast::error_code ec;
  auto with_ec = net::redirect_error(net::use_awaitable, ec);
  beast::tcp_stream stream(co_await net::this_coro::executor);
  // One deadline for the whole request: connect, send and the full stream.
  stream.expires_at(std::chrono::steady_clock::now() + call.timeout);

  // A fresh connection per request: a streamed response holds its connection for the whole
  // generation anyway, so pooling would save only a loopback handshake.
  out.send_s = seconds_since(call.origin);
  co_await stream.async_connect(*call.endpoints, with_ec);
  if (ec) {
    out.error = "connect: " + describe(ec, call.timeout);
    out.connection_error = ec != beast::error::timeout;
    co_return;
  }

  http::request<http::string_body> req{http::verb::post, call.url->target("/v1/completions"), 11};
  req.set(http::field::host, call.url->host_header());
  req.set(http::field::user_agent, "supernode-bench-serve");
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  req.body() = completion_request_body(call.model, request, call.return_token_ids);
  req.prepare_payload();
  co_await http::async_write(stream, req, with_ec);
  if (ec) {
    out.error = "send: " + describe(ec, call.timeout);
    out.connection_error = ec != beast::error::timeout;
    co_return;
  }

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  co_await http::async_read_header(stream, buffer, parser, with_ec);
  if (ec) {
    out.error = "response header: " + describe(ec, call.timeout);
    out.connection_error = ec != beast::error::timeout;
    co_return;
  }
  out.http_status = parser.get().result_int();
  const bool streaming = out.http_status == 200;
  if (streaming) {
    const auto type = parser.get()[http::field::content_type];
    if (type.substr(0, 17) != "text/event-stream") {
      out.error =
          "HTTP 200 with Content-Type '" + std::string(type) + "', expected text/event-stream";
      co_return;
    }
  }

  completion_stream events;
  std::string error_body;
  char chunk[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    // read_some, not read: each token event is stamped when its bytes arrive, not when a
    // buffer fills.
    co_await http::async_read_some(stream, buffer, parser, with_ec);
    if (ec == http::error::need_buffer) ec = {};
    const size_t got = sizeof chunk - parser.get().body().size;
    if (got > 0 && streaming) {
      const size_t before = events.token_times_s().size();
      events.feed(std::string_view(chunk, got), seconds_since(call.origin));
      if (call.tokens_seen) *call.tokens_seen += events.token_times_s().size() - before;
      // After [DONE] only the chunked terminator can follow; waiting for it buys nothing.
      if (events.done() || events.failed()) break;
    } else if (got > 0 && error_body.size() < max_error_body) {
      error_body.append(chunk, std::min(got, max_error_body - error_body.size()));
    }
    if (ec) break;
  }
  out.end_s = seconds_since(call.origin);

  if (!streaming) {
    out.error = "HTTP " + std::to_string(out.http_status) + ": " + error_message_of(error_body);
    co_return;
  }
  if (!events.done() && !events.failed()) {
    if (ec) {
      out.error = "reading stream: " + describe(ec, call.timeout);
      out.connection_error = ec != beast::error::timeout;
    } else
      events.finish();
  }
  out.token_times_s = events.token_times_s();
  out.token_ids = events.token_ids();
  out.completion_tokens = events.completion_tokens();
  if (events.error()) out.error = *events.error();
  out.ok = out.error.empty();
  stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
}

} // namespace

std::string completion_request_body(const std::string& model, const planned_request& request,
                                    bool return_token_ids) {
  nlohmann::json body = {
      {"model", model},
      {"prompt", request.prompt},
      {"max_tokens", request.max_tokens},
      {"temperature", 0},
      {"ignore_eos", true},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
  };
  if (return_token_ids) body["return_token_ids"] = true;
  return body.dump();
}

net::awaitable<void> stream_completion(const completion_call& call, const planned_request& request,
                                       request_outcome& out) {
  out.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  out.max_tokens = request.max_tokens;
  try {
    co_await stream_completion_or_throw(call, request, out);
  } catch (const std::exception& e) {
    out.ok = false;
    out.error = std::string("client error: ") + e.what();
  }
  if (out.end_s < out.send_s) out.end_s = seconds_since(call.origin);
}

http_response http_request(const http_url& url, const std::string& method,
                           const std::string& target, const std::string& body,
                           std::chrono::steady_clock::duration timeout,
                           const std::string& content_type, const std::string& bearer) {
  http_response out;
  try {
    net::io_context io;
    net::ip::tcp::resolver resolver(io);
    beast::tcp_stream stream(io);
    stream.expires_after(timeout);
    stream.connect(resolver.resolve(url.host, url.port));
    http::request<http::string_body> req{http::string_to_verb(method), url.target(target), 11};
    req.set(http::field::host, url.host_header());
    req.set(http::field::user_agent, "supernode");
    if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
    if (!body.empty() || req.method() == http::verb::post) {
      req.set(http::field::content_type, content_type);
      req.body() = body;
      req.prepare_payload();
    }
    http::write(stream, req);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(size_t{256} << 20);
    http::read(stream, buffer, parser);
    const auto& res = parser.get();
    out.status = res.result_int();
    out.content_type = std::string(res[http::field::content_type]);
    out.body = res.body();
    beast::error_code ec;
    stream.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  } catch (const boost::system::system_error& e) {
    out.error = describe(e.code(), timeout);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

std::string http_get_ok(const http_url& url, const std::string& target, double timeout_s) {
  const auto timeout = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(timeout_s));
  const auto r = http_request(url, "GET", target, "", timeout);
  const std::string what = "GET http://" + url.host_header() + url.target(target);
  if (!r.error.empty()) throw std::runtime_error(what + ": " + r.error);
  if (r.status != 200)
    throw std::runtime_error(what + ": HTTP " + std::to_string(r.status) + ": " +
                             error_message_of(r.body));
  return r.body;
}

served_model fetch_served_model(const http_url& url, double timeout_s) {
  const auto body = http_get_ok(url, "/v1/models", timeout_s);
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw std::runtime_error("GET /v1/models: no model listed in '" + body.substr(0, 200) + "'");
  served_model m;
  m.id = j["data"][0]["id"].get<std::string>();
  if (auto len = j["data"][0].find("max_model_len");
      len != j["data"][0].end() && len->is_number_integer())
    m.max_model_len = len->get<int64_t>();
  return m;
}

} // namespace supernode::services::loadgen
