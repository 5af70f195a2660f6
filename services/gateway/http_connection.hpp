#pragma once
// One client connection of the gateway's HTTP server and the exchange objects it hands to the
// handler. Private to services/gateway (http_server.hpp is the interface).
//
// Threading: everything a connection does runs on its strand. Exchanges are called from any
// thread and post to that strand; they hold the connection only weakly, so a connection lives
// exactly as long as its reader (and writer) coroutines and pending timers, and a posted call
// that arrives after the connection closed finds nothing and does nothing.

#include "services/beast.hpp"
#include "services/gateway/http_server.hpp"

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace supernode::services::gateway {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

class http_connection;

struct http_server::shared_state : std::enable_shared_from_this<shared_state> {
  shared_state(http_server_options o, http_handler h)
      : options(std::move(o)), handler(std::move(h)) {
    // nop
  }

  const http_server_options options;
  const http_handler handler;
  net::io_context io; // declared before everything that uses its services
  tcp::acceptor acceptor{io};
  uint16_t port = 0;

  std::mutex lifecycle_mutex; // start() and stop()
  std::vector<std::thread> threads;

  std::mutex connections_mutex;
  bool stopping = false; // no connection registers after stop() took its snapshot
  std::unordered_map<const http_connection*, std::weak_ptr<http_connection>> connections;
  // Connections admitted (not refused) in all and per client address: what the limits count.
  size_t admitted = 0;
  std::map<net::ip::address, size_t> admitted_per_client;
  std::unordered_map<const http_connection*, net::ip::address> admitted_clients;

  // Registers a new connection and says whether it is admitted; connections_mutex held.
  enum class admission { admitted, client_over_limit, server_full };
  admission admit(const http_connection* c, std::weak_ptr<http_connection> weak,
                  const net::ip::address& client);
  // Unregisters it (once; later calls do nothing); connections_mutex held.
  void forget(const http_connection* c);
};

class http_exchange_impl final : public http_exchange,
                                 public std::enable_shared_from_this<http_exchange_impl> {
public:
  http_exchange_impl(std::weak_ptr<http_connection> connection, unsigned version, bool keep_alive);

  void respond(unsigned status, std::string content_type, std::string body) override;
  void respond(unsigned status, std::string content_type, std::string body,
               const header_fields& extra) override;
  void send_event(std::string payload) override;
  void end_stream() override;
  void set_disconnect_handler(std::function<void()> fn) override;
  bool finished() const override { return ended_ || gone_; }

private:
  friend class http_connection;

  template<class F>
  void post(F f); // runs f(connection, *this) on the connection's strand, if it still exists

  const std::weak_ptr<http_connection> connection_;
  const unsigned version_;
  const bool keep_alive_;
  const bool chunked_; // HTTP/1.0 has no chunked encoding: its streams end with the connection

  std::atomic<bool> ended_{false}; // the caller ended it (respond/end_stream)
  std::atomic<bool> gone_{false};  // the client went away first

  // Strand-only.
  enum class phase { awaiting, streaming, ended };
  phase phase_ = phase::awaiting;
  std::function<void()> on_disconnect_;
};

class http_connection : public std::enable_shared_from_this<http_connection> {
public:
  http_connection(std::shared_ptr<http_server::shared_state> state, tcp::socket socket);
  ~http_connection();

  // Starts the reader, or answers a refused connection (429 or 503) and closes.
  void start(http_server::shared_state::admission admission);

  // Closes the socket at once; an unfinished exchange sees a disconnect.
  void close();

  net::any_io_executor executor() { return socket_.get_executor(); }

  // Strand side of http_exchange_impl.
  void on_respond(http_exchange_impl& ex, std::string response);
  void on_event(http_exchange_impl& ex, std::string event);
  void on_end_stream(http_exchange_impl& ex);
  void on_set_disconnect_handler(http_exchange_impl& ex, std::function<void()> fn);

private:
  struct outgoing {
    std::string bytes;
    bool close_after = false; // half-close once written (no keep-alive, or an error reply)
  };

  // The coroutines take their owner as a parameter: a coroutine starts later than it is created,
  // and parameters are what its frame keeps alive from the start.
  net::awaitable<void> read_loop(std::shared_ptr<http_connection> self);
  net::awaitable<void> refuse(std::shared_ptr<http_connection> self, unsigned status,
                              std::string message);
  // Reads one request into `parser`: waits for its first byte (idle), then its header
  // (header_timeout), then its body (idle_timeout).
  net::awaitable<beast::error_code> read_request(http::request_parser<http::string_body>& parser);
  net::awaitable<bool> watch_exchange();
  net::awaitable<void> drain();
  net::awaitable<void> write_loop(std::shared_ptr<http_connection> self);

  void start_exchange(http::request<http::string_body> request);
  void end_exchange(http_exchange_impl& ex, std::string last_bytes, bool close_after);
  void reply_error(unsigned status, const std::string& message);
  void handle_read_error(const beast::error_code& ec);
  void enqueue(std::string bytes, bool close_after = false);
  void half_close();
  void close_when_written();
  void fire_disconnect(http_exchange_impl& ex);
  void arm_timer(std::chrono::steady_clock::duration after);
  void disarm_timer();
  void on_timer();
  bool exchange_open() const;

  const std::shared_ptr<http_server::shared_state> state_; // first: keeps the io_context alive
  tcp::socket socket_;
  net::steady_timer timer_; // idle or header timeout, or the linger after a half-close
  // What the timer bounds: an expired header wait is answered 408, anything else just closes.
  enum class waiting { other, header, header_expired };
  waiting waiting_ = waiting::other;
  net::steady_timer exchange_end_; // wakes the reader when the exchange ends
  beast::flat_buffer buffer_;
  std::shared_ptr<http_exchange_impl> current_;
  std::deque<outgoing> outbox_;
  bool writing_ = false;
  bool keep_open_ = true;    // the last response allows another request
  bool half_closed_ = false; // our side is done sending
  bool close_after_write_ = false;
  bool closed_ = false;
};

} // namespace supernode::services::gateway
