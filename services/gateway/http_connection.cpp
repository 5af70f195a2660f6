#include "services/gateway/http_connection.hpp"

#include "services/gateway/error_mapping.hpp"
#include "services/gateway/http_wire.hpp"
#include "services/gateway/openai_api.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

namespace supernode::services::gateway {

namespace {

// After an error reply or a "Connection: close" response our side half-closes and reads what the
// client still sends, so that closing does not reset the connection and destroy the reply in the
// client's receive buffer. Bounded in time and bytes.
constexpr auto linger_time = std::chrono::seconds(5);
constexpr size_t max_drain_bytes = 1 << 20;

auto redirect(beast::error_code& ec) {
  return net::redirect_error(net::use_awaitable, ec);
}

bool wants_100_continue(const http::request_parser<http::string_body>& parser) {
  const auto& req = parser.get();
  return req.version() >= 11 && !parser.is_done() &&
         beast::iequals(req[http::field::expect], "100-continue");
}

http_request to_http_request(http::request<http::string_body>&& req) {
  http_request out;
  out.method = std::string(req.method_string());
  out.target = std::string(req.target());
  for (const auto& field : req) {
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    const std::string_view value(field.value().data(), field.value().size());
    auto [it, inserted] = out.headers.try_emplace(std::move(name), value);
    if (!inserted) it->second.append(", ").append(value);
  }
  out.body = std::move(req.body());
  return out;
}

// User callbacks must not take an io thread down with them.
void call_guarded(const std::function<void()>& fn) {
  try {
    fn();
  } catch (...) {
    // nop: nobody to report to on an io thread; the exchange is over either way
  }
}

} // namespace

// ---- http_exchange_impl: any thread ----

http_exchange_impl::http_exchange_impl(std::weak_ptr<http_connection> connection, unsigned version,
                                       bool keep_alive)
    : connection_(std::move(connection)), version_(version), keep_alive_(keep_alive),
      chunked_(version >= 11) {
  // nop
}

template<class F>
void http_exchange_impl::post(F f) {
  auto connection = connection_.lock();
  if (!connection) return;
  // Weak again inside: a call queued on an io_context that has stopped must not keep the
  // connection (and through it the io_context) alive.
  net::post(connection->executor(),
            [weak = connection_, self = shared_from_this(), f = std::move(f)]() mutable {
              if (auto c = weak.lock()) f(*c, *self);
            });
}

void http_exchange_impl::respond(unsigned status, std::string content_type, std::string body) {
  respond(status, std::move(content_type), std::move(body), {});
}

void http_exchange_impl::respond(unsigned status, std::string content_type, std::string body,
                                 const header_fields& extra) {
  if (gone_ || ended_.exchange(true)) return;
  // Serialized here, on the caller's thread, so the io thread only copies bytes.
  std::string bytes =
      wire::response(status, version_, keep_alive_, content_type, std::move(body), extra);
  post([bytes = std::move(bytes)](http_connection& c, http_exchange_impl& ex) mutable {
    c.on_respond(ex, std::move(bytes));
  });
}

void http_exchange_impl::send_event(std::string payload) {
  if (gone_ || ended_) return;
  post(
      [bytes = wire::event(payload, chunked_)](http_connection& c, http_exchange_impl& ex) mutable {
        c.on_event(ex, std::move(bytes));
      });
}

void http_exchange_impl::end_stream() {
  if (gone_ || ended_.exchange(true)) return;
  post([](http_connection& c, http_exchange_impl& ex) { c.on_end_stream(ex); });
}

void http_exchange_impl::set_disconnect_handler(std::function<void()> fn) {
  auto connection = connection_.lock();
  if (!connection) {
    // A connection only goes away after telling its open exchange the client is gone.
    if (!ended_) fn();
    return;
  }
  net::post(connection->executor(),
            [weak = connection_, self = shared_from_this(), fn = std::move(fn)]() mutable {
              if (auto c = weak.lock())
                c->on_set_disconnect_handler(*self, std::move(fn));
              else if (!self->ended_)
                call_guarded(fn);
            });
}

// ---- http_connection: its strand ----

http_connection::http_connection(std::shared_ptr<http_server::shared_state> state,
                                 tcp::socket socket)
    : state_(std::move(state)), socket_(std::move(socket)), timer_(socket_.get_executor()),
      exchange_end_(socket_.get_executor()) {
  // nop
}

http_connection::~http_connection() {
  std::lock_guard lock(state_->connections_mutex);
  state_->forget(this);
}

void http_connection::start(http_server::shared_state::admission admission) {
  using enum http_server::shared_state::admission;
  auto self = shared_from_this();
  if (admission == admitted)
    net::co_spawn(executor(), read_loop(std::move(self)), net::detached);
  else if (admission == client_over_limit)
    net::co_spawn(executor(),
                  refuse(std::move(self), 429,
                         "too many connections from your address (limit " +
                             std::to_string(state_->options.max_connections_per_client) + ")"),
                  net::detached);
  else
    net::co_spawn(executor(), refuse(std::move(self), 503, "too many connections: try again later"),
                  net::detached);
}

net::awaitable<void> http_connection::refuse([[maybe_unused]] std::shared_ptr<http_connection> self,
                                             unsigned status, std::string message) {
  arm_timer(state_->options.idle_timeout);
  reply_error(status, message);
  co_await drain();
}

net::awaitable<beast::error_code>
http_connection::read_request(http::request_parser<http::string_body>& parser) {
  const auto& options = state_->options;
  beast::error_code ec;
  if (buffer_.size() == 0) {
    // Idle: the idle timer, armed when the connection opened or the last exchange ended, runs.
    co_await socket_.async_wait(tcp::socket::wait_read, redirect(ec));
    if (ec || closed_) co_return ec;
  }
  waiting_ = waiting::header;
  arm_timer(options.header_timeout);
  co_await http::async_read_header(socket_, buffer_, parser, redirect(ec));
  if (waiting_ == waiting::header) waiting_ = waiting::other;
  if (ec) co_return ec;
  arm_timer(options.idle_timeout);
  if (wants_100_continue(parser)) enqueue(std::string(wire::continue_100));
  if (!parser.is_done()) co_await http::async_read(socket_, buffer_, parser, redirect(ec));
  co_return ec;
}

net::awaitable<void>
http_connection::read_loop([[maybe_unused]] std::shared_ptr<http_connection> self) {
  const auto& options = state_->options;
  arm_timer(options.idle_timeout);
  while (!closed_) {
    http::request_parser<http::string_body> parser;
    parser.header_limit(static_cast<uint32_t>(
        std::min<size_t>(options.max_header_bytes, std::numeric_limits<uint32_t>::max())));
    parser.body_limit(options.max_body_bytes);
    const beast::error_code ec = co_await read_request(parser);
    if (ec && waiting_ == waiting::header_expired) {
      co_await drain(); // the 408 is on its way; read what the client still sends, then close
      co_return;
    }
    if (ec) {
      handle_read_error(ec);
      if (!closed_ && !keep_open_) co_await drain();
      co_return;
    }
    disarm_timer();
    start_exchange(parser.release());
    if (!co_await watch_exchange()) co_return;
    if (!keep_open_) {
      co_await drain();
      co_return;
    }
  }
}

// Keeps a read pending while the exchange is open: it is how a client that leaves is noticed
// before anything is written to it. Bytes that arrive meanwhile are the start of a pipelined next
// request; they stay in buffer_ for the parser, and from then on the reader waits for the
// exchange to end instead of reading (a pending read would not wake it when the exchange ends, so
// an already buffered request would wait for more bytes that may never come). A client that
// leaves while its pipelined request waits is noticed on the next write.
net::awaitable<bool> http_connection::watch_exchange() {
  while (!closed_ && exchange_open()) {
    beast::error_code ec;
    if (buffer_.size() > 0) {
      exchange_end_.expires_at(net::steady_timer::time_point::max());
      co_await exchange_end_.async_wait(redirect(ec));
      continue;
    }
    const size_t n = co_await socket_.async_read_some(buffer_.prepare(4096), redirect(ec));
    if (closed_) co_return false;
    if (ec) {
      if (exchange_open()) {
        close(); // the client left before its answer was complete
        co_return false;
      }
      co_return true; // answered already; the next read sees the same end of stream
    }
    buffer_.commit(n);
  }
  co_return !closed_;
}

net::awaitable<void> http_connection::drain() {
  std::array<char, 4096> scratch;
  size_t drained = 0;
  while (!closed_ && drained < max_drain_bytes) {
    beast::error_code ec;
    drained += co_await socket_.async_read_some(net::buffer(scratch), redirect(ec));
    if (ec) break;
  }
  close_when_written();
}

net::awaitable<void>
http_connection::write_loop([[maybe_unused]] std::shared_ptr<http_connection> self) {
  while (!closed_ && !outbox_.empty()) {
    // Everything queued goes out in one write: a burst of events costs one system call.
    std::string bytes;
    bool close_after = false;
    while (!outbox_.empty() && !close_after) {
      outgoing& next = outbox_.front();
      if (bytes.empty())
        bytes = std::move(next.bytes);
      else
        bytes += next.bytes;
      close_after = next.close_after;
      outbox_.pop_front();
    }
    beast::error_code ec;
    co_await net::async_write(socket_, net::buffer(bytes), redirect(ec));
    if (closed_) break;
    if (ec) {
      close(); // the client is gone; asio sends with MSG_NOSIGNAL, so this is an error, not SIGPIPE
      break;
    }
    if (close_after) {
      half_close();
      break;
    }
  }
  writing_ = false;
  if (!closed_ && close_after_write_) close();
}

void http_connection::start_exchange(http::request<http::string_body> request) {
  auto ex = std::make_shared<http_exchange_impl>(weak_from_this(), request.version(),
                                                 request.keep_alive());
  current_ = ex;
  // What went wrong stays in the log: an exception's text may name files and addresses.
  const auto& log = state_->options.log;
  auto internal = [&] {
    ex->respond(500, "application/json",
                error_body(to_api_error(
                    {protocol::serving_errc::internal,
                     "internal error at " + log.instance() + ": the details are in its log"})));
  };
  try {
    state_->handler(ex, to_http_request(std::move(request)));
  } catch (const std::exception& e) {
    log.error("http server: the request handler threw: {}", e.what());
    internal();
  } catch (...) {
    log.error("http server: the request handler threw something not an exception");
    internal();
  }
}

void http_connection::on_respond(http_exchange_impl& ex, std::string response) {
  if (closed_ || &ex != current_.get()) return;
  if (ex.phase_ == http_exchange_impl::phase::streaming) {
    on_end_stream(ex); // the status line is long gone; end the stream the client is reading
    return;
  }
  end_exchange(ex, std::move(response), !ex.keep_alive_);
}

void http_connection::on_event(http_exchange_impl& ex, std::string event) {
  if (closed_ || &ex != current_.get()) return;
  if (ex.phase_ == http_exchange_impl::phase::awaiting) {
    enqueue(wire::event_stream_header(ex.version_, ex.keep_alive_ && ex.chunked_, ex.chunked_));
    ex.phase_ = http_exchange_impl::phase::streaming;
  }
  enqueue(std::move(event));
}

void http_connection::on_end_stream(http_exchange_impl& ex) {
  if (closed_ || &ex != current_.get()) return;
  const bool keep_alive = ex.keep_alive_ && ex.chunked_;
  if (ex.phase_ == http_exchange_impl::phase::awaiting)
    enqueue(wire::event_stream_header(ex.version_, keep_alive, ex.chunked_));
  end_exchange(ex, ex.chunked_ ? std::string(wire::last_chunk) : std::string(), !keep_alive);
}

void http_connection::on_set_disconnect_handler(http_exchange_impl& ex, std::function<void()> fn) {
  if (ex.ended_) return; // ended by the caller: there is no disconnect left to report
  if (ex.gone_) {
    call_guarded(fn);
    return;
  }
  ex.on_disconnect_ = std::move(fn);
}

void http_connection::end_exchange(http_exchange_impl& ex, std::string last_bytes,
                                   bool close_after) {
  ex.phase_ = http_exchange_impl::phase::ended;
  ex.on_disconnect_ = nullptr; // it may hold the exchange: a cycle otherwise
  current_.reset();
  keep_open_ = !close_after;
  enqueue(std::move(last_bytes), close_after);
  exchange_end_.cancel();
  if (keep_open_) arm_timer(state_->options.idle_timeout);
}

void http_connection::fire_disconnect(http_exchange_impl& ex) {
  ex.gone_ = true;
  ex.phase_ = http_exchange_impl::phase::ended;
  auto fn = std::move(ex.on_disconnect_);
  ex.on_disconnect_ = nullptr;
  if (fn && !ex.ended_) call_guarded(fn);
}

void http_connection::handle_read_error(const beast::error_code& ec) {
  if (closed_) return;
  const auto& options = state_->options;
  if (ec == http::error::body_limit) {
    reply_error(413, "request body exceeds the limit of " + std::to_string(options.max_body_bytes) +
                         " bytes");
  } else if (ec == http::error::header_limit) {
    reply_error(431, "request header fields exceed the limit of " +
                         std::to_string(options.max_header_bytes) + " bytes");
  } else if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
             ec.category() != http::make_error_code(http::error::bad_method).category()) {
    close_when_written(); // the client closed or the socket failed: nobody to answer
  } else {
    reply_error(400, "malformed HTTP request: " + ec.message());
  }
}

void http_connection::reply_error(unsigned status, const std::string& message) {
  const api_error error(status, message, status >= 500 ? "server_error" : "invalid_request_error");
  keep_open_ = false;
  enqueue(wire::response(status, 11, false, "application/json", error_body(error)), true);
}

void http_connection::enqueue(std::string bytes, bool close_after) {
  if (closed_ || half_closed_) return;
  outbox_.push_back({std::move(bytes), close_after});
  if (writing_) return;
  writing_ = true;
  net::co_spawn(executor(), write_loop(shared_from_this()), net::detached);
}

void http_connection::half_close() {
  half_closed_ = true;
  outbox_.clear();
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  if (close_after_write_) {
    close();
    return;
  }
  arm_timer(linger_time); // the reader drains until the client closes or this expires
}

void http_connection::close_when_written() {
  if (writing_)
    close_after_write_ = true;
  else
    close();
}

void http_connection::close() {
  if (closed_) return;
  closed_ = true;
  if (auto ex = std::move(current_)) fire_disconnect(*ex);
  beast::error_code ec;
  socket_.close(ec);
  timer_.cancel();
  exchange_end_.cancel();
  outbox_.clear();
  std::lock_guard lock(state_->connections_mutex);
  state_->forget(this);
}

bool http_connection::exchange_open() const {
  return current_ != nullptr;
}

void http_connection::arm_timer(std::chrono::steady_clock::duration after) {
  if (closed_) return;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this()](const beast::error_code& ec) {
    // A wait that completed just before being re-armed or disarmed is stale.
    if (ec || self->timer_.expiry() > net::steady_timer::clock_type::now()) return;
    self->on_timer();
  });
}

void http_connection::disarm_timer() {
  timer_.expires_at(net::steady_timer::time_point::max());
}

void http_connection::on_timer() {
  if (closed_) return;
  if (half_closed_) {
    close(); // lingered long enough
    return;
  }
  if (waiting_ == waiting::header) {
    // The read of the header ends (aborted) and the reader drains while the 408 goes out.
    waiting_ = waiting::header_expired;
    beast::error_code ignored;
    socket_.cancel(ignored);
    reply_error(408, "the request header did not arrive within " +
                         std::to_string(state_->options.header_timeout.count()) + " ms");
    return;
  }
  if (exchange_open()) return; // the handler owns the time of an open exchange
  if (writing_) {
    arm_timer(state_->options.idle_timeout); // a slow reader is not an idle one
    return;
  }
  close();
}

} // namespace supernode::services::gateway
