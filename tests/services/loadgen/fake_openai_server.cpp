#include "tests/services/loadgen/fake_openai_server.hpp"

#include "services/beast.hpp"

#include <nlohmann/json.hpp>
#include <thread>

namespace supernode::tests::loadgen {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

std::string token_event(int64_t i, int64_t n) {
  nlohmann::json chunk = {
      {"id", "cmpl-fake"},
      {"object", "text_completion"},
      {"created", 1},
      {"model", "fake-model"},
      {"choices",
       {{{"index", 0},
         {"text", i % 4 == 3 ? "" : "t" + std::to_string(i)}, // some pieces are empty
         {"logprobs", nullptr},
         {"finish_reason", i + 1 == n ? nlohmann::json("length") : nlohmann::json(nullptr)}}}},
      {"usage", nullptr}};
  return "data: " + chunk.dump() + "\n\n";
}

std::string usage_event(int64_t prompt, int64_t completion) {
  nlohmann::json chunk = {{"id", "cmpl-fake"},
                          {"object", "text_completion"},
                          {"created", 1},
                          {"model", "fake-model"},
                          {"choices", nlohmann::json::array()},
                          {"usage",
                           {{"prompt_tokens", prompt},
                            {"completion_tokens", completion},
                            {"total_tokens", prompt + completion}}}};
  return "data: " + chunk.dump() + "\n\n";
}

bool well_formed(const nlohmann::json& body) {
  return body.is_object() && body.value("stream", false) && body.value("ignore_eos", false) &&
         body.contains("model") && body.contains("max_tokens") &&
         body["max_tokens"].is_number_integer() && body.contains("prompt") &&
         body["prompt"].is_array() && !body["prompt"].empty() &&
         body["prompt"][0].is_number_integer() && body.contains("temperature") &&
         body["stream_options"].value("include_usage", false);
}

} // namespace

struct fake_openai_server::state {
  explicit state(fake_server_options o)
      : options(std::move(o)), acceptor(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)),
        gate(ioc), port(acceptor.local_endpoint().port()) {}

  net::awaitable<void> accept_loop() {
    for (;;) {
      auto socket = co_await acceptor.async_accept(net::use_awaitable);
      net::co_spawn(ioc, session(std::move(socket)), net::detached);
    }
  }

  net::awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    try {
      co_await http::async_read(stream, buffer, req, net::use_awaitable);
      if (req.method() == http::verb::get && req.target() == "/v1/models")
        co_await answer_models(stream, req);
      else
        co_await answer_completion(stream, req);
    } catch (const std::exception&) {
      // The client hung up (it stops reading after [DONE]) or timed out: nothing to do.
    }
  }

  net::awaitable<void> answer_models(beast::tcp_stream& stream,
                                     const http::request<http::string_body>& req) {
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.set(http::field::content_type, "application/json");
    res.body() = nlohmann::json{{"object", "list"},
                                {"data",
                                 {{{"id", options.model_id},
                                   {"object", "model"},
                                   {"max_model_len", options.max_model_len}}}}}
                     .dump();
    res.prepare_payload();
    co_await http::async_write(stream, res, net::use_awaitable);
  }

  // Counts a request open from the moment it is read until its server decides to end it, so
  // that a client which starts its next request on seeing [DONE] never overlaps it.
  struct open_stream {
    state& s;
    bool open = true;
    explicit open_stream(state& st) : s(st) {
      const int64_t now = ++s.open_streams;
      if (now > s.max_open) s.max_open = now;
    }
    void close() {
      if (open) --s.open_streams;
      open = false;
    }
    ~open_stream() { close(); }
  };

  net::awaitable<void> answer_completion(beast::tcp_stream& stream,
                                         const http::request<http::string_body>& req) {
    const int64_t nth = ++received;
    open_stream guard(*this);
    // The barrier: a cancelled timer wakes every waiter once the wave is complete.
    if (options.first_wave > 0 && !wave_released) {
      if (open_streams >= options.first_wave) {
        wave_released = true;
        gate.cancel();
      }
      while (!wave_released) {
        gate.expires_at(net::steady_timer::time_point::max());
        beast::error_code ec;
        co_await gate.async_wait(net::redirect_error(net::use_awaitable, ec));
      }
    }

    const auto body = nlohmann::json::parse(req.body(), nullptr, false);
    const fake_reply reply = options.reply_for(nth);
    if (!well_formed(body)) {
      ++bad;
      guard.close();
      co_await write_error(stream, req, http::status::bad_request, "bad request body");
      co_return;
    }
    if (reply == fake_reply::overloaded) {
      guard.close();
      co_await write_error(stream, req, http::status::too_many_requests,
                           "server overloaded, retry later");
      co_return;
    }
    if (reply == fake_reply::silent) {
      guard.close(); // the client gives up on it and moves on
      net::steady_timer never(ioc, net::steady_timer::time_point::max());
      beast::error_code ec;
      co_await never.async_wait(net::redirect_error(net::use_awaitable, ec));
      co_return;
    }

    http::response<http::empty_body> head{http::status::ok, req.version()};
    head.set(http::field::content_type, "text/event-stream");
    head.set(http::field::cache_control, "no-cache");
    head.chunked(true);
    http::response_serializer<http::empty_body> sr{head};
    co_await http::async_write_header(stream, sr, net::use_awaitable);

    const int64_t n = body["max_tokens"].get<int64_t>();
    std::vector<std::string> events;
    for (int64_t i = 0; i < n; ++i) events.push_back(token_event(i, n));
    if (reply == fake_reply::malformed) {
      guard.close(); // the client stops at the bad event
      events.insert(events.begin() + n / 2, "data: {oops\n\n");
    }
    if (reply == fake_reply::truncated) {
      guard.close();
      events.resize(static_cast<size_t>(n / 2));
      co_await write_chunks(stream, events, nth);
      stream.socket().shutdown(tcp::socket::shutdown_both);
      co_return;
    }
    events.push_back(usage_event(static_cast<int64_t>(body["prompt"].size()), n));
    guard.close();
    events.push_back("data: [DONE]\n\n");
    co_await write_chunks(stream, events, nth);
    co_await net::async_write(stream, http::make_chunk_last(), net::use_awaitable);
  }

  // Request 1, 4, 7...: one HTTP chunk per event; 2, 5, 8...: everything in one chunk;
  // 3, 6, 9...: each event cut in two chunks, mid-line.
  net::awaitable<void> write_chunks(beast::tcp_stream& stream,
                                    const std::vector<std::string>& events, int64_t nth) {
    auto send = [&](const std::string& s) {
      return net::async_write(stream, http::make_chunk(net::buffer(s)), net::use_awaitable);
    };
    if (nth % 3 == 2) {
      std::string all;
      for (const auto& e : events) all += e;
      if (!all.empty()) co_await send(all);
      co_return;
    }
    for (const auto& e : events) {
      if (nth % 3 == 0) {
        co_await send(e.substr(0, e.size() / 2));
        co_await send(e.substr(e.size() / 2));
      } else {
        co_await send(e);
      }
    }
  }

  net::awaitable<void> write_error(beast::tcp_stream& stream,
                                   const http::request<http::string_body>& req, http::status status,
                                   const std::string& message) {
    http::response<http::string_body> res{status, req.version()};
    res.set(http::field::content_type, "application/json");
    res.body() = nlohmann::json{{"error", {{"message", message}, {"type", "fake_error"}}}}.dump();
    res.prepare_payload();
    co_await http::async_write(stream, res, net::use_awaitable);
  }

  fake_server_options options;
  net::io_context ioc{1};
  tcp::acceptor acceptor;
  net::steady_timer gate;
  const uint16_t port;
  bool wave_released = false;
  std::atomic<int64_t> received{0}, open_streams{0}, max_open{0}, bad{0};
  std::thread thread;
};

fake_openai_server::fake_openai_server(fake_server_options options)
    : state_(std::make_unique<state>(std::move(options))) {
  net::co_spawn(state_->ioc, state_->accept_loop(), net::detached);
  state_->thread = std::thread([s = state_.get()] { s->ioc.run(); });
}

fake_openai_server::~fake_openai_server() {
  state_->ioc.stop();
  state_->thread.join();
}

uint16_t fake_openai_server::port() const {
  return state_->port;
}
int64_t fake_openai_server::completions_received() const {
  return state_->received;
}
int64_t fake_openai_server::max_open_streams() const {
  return state_->max_open;
}
int64_t fake_openai_server::bad_requests() const {
  return state_->bad;
}

} // namespace supernode::tests::loadgen
