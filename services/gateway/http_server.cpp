#include "services/gateway/http_server.hpp"

#include "services/gateway/http_connection.hpp"

#include <stdexcept>

namespace supernode::services::gateway {

namespace {

tcp::endpoint resolve(net::io_context& io, const std::string& host, uint16_t port) {
  beast::error_code ec;
  const auto address = net::ip::make_address(host, ec);
  if (!ec) return {address, port};
  tcp::resolver resolver(io);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive);
  return results.begin()->endpoint();
}

net::awaitable<void> accept_loop(http_server::shared_state& state) {
  for (;;) {
    beast::error_code ec;
    // Each connection gets its own strand, so any number of io threads may serve them.
    tcp::socket socket(net::make_strand(state.io));
    co_await state.acceptor.async_accept(socket, net::redirect_error(net::use_awaitable, ec));
    if (ec) {
      if (!state.acceptor.is_open()) co_return;
      // Out of descriptors and the like: back off rather than spin; closing connections free
      // some.
      net::steady_timer pause(state.io, std::chrono::milliseconds(50));
      co_await pause.async_wait(net::redirect_error(net::use_awaitable, ec));
      continue;
    }
    const auto client = socket.remote_endpoint(ec).address();
    if (ec) continue; // gone already
    auto connection =
        std::make_shared<http_connection>(state.shared_from_this(), std::move(socket));
    http_server::shared_state::admission admission;
    {
      std::lock_guard lock(state.connections_mutex);
      if (state.stopping) continue; // stop() has taken its snapshot; the socket just closes
      admission = state.admit(connection.get(), connection, client);
    }
    connection->start(admission);
  }
}

void run_io(net::io_context& io, const log::logger& log) {
  // A handler that throws must not end the thread: the other connections still need it.
  for (;;) {
    try {
      io.run();
      return;
    } catch (const std::exception& e) {
      log.error("http server: io thread caught: {}", e.what());
    } catch (...) {
      log.error("http server: io thread caught an unknown exception");
    }
  }
}

} // namespace

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") return true;
  beast::error_code ec;
  const auto address = net::ip::make_address(host, ec);
  return !ec && address.is_loopback();
}

http_server::shared_state::admission
http_server::shared_state::admit(const http_connection* c, std::weak_ptr<http_connection> weak,
                                 const net::ip::address& client) {
  connections.emplace(c, std::move(weak));
  size_t& from_client = admitted_per_client[client];
  // The address's own limit first: a client over it is told so even when the server is full.
  if (from_client >= options.max_connections_per_client) {
    if (from_client == 0) admitted_per_client.erase(client);
    return admission::client_over_limit;
  }
  if (admitted >= options.max_connections) {
    if (from_client == 0) admitted_per_client.erase(client);
    return admission::server_full;
  }
  ++from_client;
  ++admitted;
  admitted_clients.emplace(c, client);
  return admission::admitted;
}

void http_server::shared_state::forget(const http_connection* c) {
  connections.erase(c);
  auto it = admitted_clients.find(c);
  if (it == admitted_clients.end()) return;
  auto per = admitted_per_client.find(it->second);
  if (--per->second == 0) admitted_per_client.erase(per);
  --admitted;
  admitted_clients.erase(it);
}

http_server::http_server(http_server_options options, http_handler handler)
    : state_(std::make_shared<shared_state>(std::move(options), std::move(handler))) {
  // nop
}

http_server::~http_server() {
  stop();
}

void http_server::start() {
  shared_state& s = *state_;
  std::lock_guard lock(s.lifecycle_mutex);
  if (!s.threads.empty() || s.acceptor.is_open())
    throw std::logic_error("http server: already started");
  const std::string where = s.options.host + ":" + std::to_string(s.options.port);
  try {
    const tcp::endpoint endpoint = resolve(s.io, s.options.host, s.options.port);
    s.acceptor.open(endpoint.protocol());
    // Lets a restarted gateway bind while old connections sit in TIME_WAIT; a live listener on
    // the port still makes bind fail.
    s.acceptor.set_option(tcp::acceptor::reuse_address(true));
    s.acceptor.bind(endpoint);
    s.acceptor.listen(net::socket_base::max_listen_connections);
    s.port = s.acceptor.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    throw std::runtime_error("http server: cannot listen on " + where + ": " + e.code().message());
  }
  {
    std::lock_guard connections_lock(s.connections_mutex);
    s.stopping = false;
  }
  s.io.restart(); // after a stop() the io_context ran out of work, which stops it
  net::co_spawn(s.io, accept_loop(s), net::detached);
  const int threads = std::max(1, s.options.threads);
  for (int i = 0; i < threads; ++i) s.threads.emplace_back([&s] { run_io(s.io, s.options.log); });
}

uint16_t http_server::port() const {
  return state_->port;
}

size_t http_server::connection_count() const {
  std::lock_guard lock(state_->connections_mutex);
  return state_->connections.size();
}

void http_server::stop() {
  shared_state& s = *state_;
  std::lock_guard lock(s.lifecycle_mutex);
  if (s.threads.empty()) return;
  {
    std::lock_guard connections_lock(s.connections_mutex);
    s.stopping = true;
  }
  // The acceptor belongs to the io threads; closing it there ends the accept loop. Closing every
  // connection (on its strand) ends its coroutines and timers, so the io threads run out of work
  // and return: nothing is left suspended in the io_context to be destroyed with it.
  net::post(s.io, [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    std::vector<std::shared_ptr<http_connection>> open;
    {
      std::lock_guard connections_lock(s.connections_mutex);
      for (auto& [key, weak] : s.connections)
        if (auto c = weak.lock()) open.push_back(std::move(c));
    }
    for (auto& c : open) net::post(c->executor(), [c] { c->close(); });
  });
  for (std::thread& t : s.threads) t.join();
  s.threads.clear();
}

} // namespace supernode::services::gateway
