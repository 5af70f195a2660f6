// The gateway's HTTP server over real sockets. The client side is plain POSIX sockets with a
// receive timeout (so a server bug fails a test instead of hanging it) and Beast's response
// parser fed by hand, so every byte the server writes is checked. Synchronisation is by futures
// and condition variables with generous bounds, never by sleeping.

#include "services/beast.hpp"
#include "services/gateway/http_server.hpp"

#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <gtest/gtest.h>
#include <mutex>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace supernode::services::gateway;
namespace http = boost::beast::http;
using json = nlohmann::json;

namespace {

constexpr auto patience = std::chrono::seconds(20); // bound on every wait; never reached when green

class raw_client {
public:
  // From `source` (another loopback address is another client to the server) when given.
  explicit raw_client(uint16_t port, const char* source = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    timeval tv{static_cast<time_t>(patience.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (source) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      ::inet_pton(AF_INET, source, &from.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0)
        throw std::runtime_error(std::string("bind() failed: ") + std::strerror(errno));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
      throw std::runtime_error(std::string("connect() failed: ") + std::strerror(errno));
  }
  ~raw_client() { close(); }
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  void send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error(std::string("send() failed: ") + std::strerror(errno));
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }

  // Appends what arrives to input(); false on end of stream, error or timeout.
  bool receive() {
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return false;
    input_.append(buf, static_cast<size_t>(n));
    return true;
  }

  // True when the server closed the connection (EOF or reset) with nothing more sent.
  bool closed_by_server() {
    if (!input_.empty()) return false;
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    if (n == 1) input_.push_back(c);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Closes with a reset (SO_LINGER 0) instead of an orderly FIN.
  void reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    close();
  }

  std::string& input() { return input_; }

private:
  int fd_ = -1;
  std::string input_;
};

// One response read incrementally: chunks are recorded as they complete, so a test can check
// that each event arrived before the next was sent.
class response_reader {
public:
  explicit response_reader(raw_client& client) : client_(client) {
    parser_.eager(true);
    on_chunk_ = [this](uint64_t remain, boost::beast::string_view body, boost::beast::error_code&) {
      partial_.append(body.data(), body.size());
      if (remain == body.size()) chunks_.push_back(std::exchange(partial_, {}));
      return body.size();
    };
    parser_.on_chunk_body(on_chunk_);
  }

  void header() {
    pump([&] { return parser_.is_header_done(); });
  }
  std::string next_chunk() {
    const size_t want = taken_ + 1;
    pump([&] { return chunks_.size() >= want || parser_.is_done(); });
    if (chunks_.size() < want) throw std::runtime_error("stream ended without another chunk");
    return chunks_[taken_++];
  }
  void finish() {
    pump([&] { return parser_.is_done(); });
  }

  const http::response<http::string_body>& message() const { return parser_.get(); }
  unsigned status() const { return parser_.get().result_int(); }
  std::string field(http::field f) const { return std::string(parser_.get()[f]); }
  const std::vector<std::string>& chunks() const { return chunks_; }

private:
  void pump(const std::function<bool()>& satisfied) {
    std::string& in = client_.input();
    while (!satisfied()) {
      if (!in.empty()) {
        boost::beast::error_code ec;
        const size_t used = parser_.put(boost::asio::buffer(in), ec);
        in.erase(0, used);
        if (ec && ec != http::error::need_more)
          throw std::runtime_error("bad response: " + ec.message());
        if (used > 0) continue; // parse all that arrived before waiting for more
      }
      if (!client_.receive()) {
        boost::beast::error_code ec;
        parser_.put_eof(ec);
        if (satisfied()) return;
        throw std::runtime_error("connection ended (or timed out) before the response did");
      }
    }
  }

  raw_client& client_;
  http::response_parser<http::string_body> parser_;
  std::function<size_t(uint64_t, boost::beast::string_view, boost::beast::error_code&)> on_chunk_;
  std::vector<std::string> chunks_;
  std::string partial_;
  size_t taken_ = 0;
};

struct received {
  std::shared_ptr<http_exchange> exchange;
  http_request request;
};

// Requests handed over from the server thread to the test thread, which answers them.
class inbox {
public:
  void push(std::shared_ptr<http_exchange> ex, http_request req) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back({std::move(ex), std::move(req)});
    }
    cv_.notify_all();
  }
  received pop() {
    std::unique_lock lock(mutex_);
    if (!cv_.wait_for(lock, patience, [&] { return !items_.empty(); }))
      throw std::runtime_error("no request reached the handler");
    received r = std::move(items_.front());
    items_.pop_front();
    return r;
  }
  http_handler handler() {
    return [this](std::shared_ptr<http_exchange> ex, http_request req) {
      push(std::move(ex), std::move(req));
    };
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<received> items_;
};

// A latch for disconnect handlers.
class signal_count {
public:
  std::function<void()> increment() {
    return [this] {
      {
        std::lock_guard lock(mutex_);
        ++count_;
      }
      cv_.notify_all();
    };
  }
  bool wait_for(int n) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, patience, [&] { return count_ >= n; });
  }
  int count() {
    std::lock_guard lock(mutex_);
    return count_;
  }

private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_ = 0;
};

http_server_options test_options() {
  http_server_options o;
  o.port = 0;
  return o;
}

std::string get(std::string_view target, std::string_view extra_headers = "") {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: test\r\n" + std::string(extra_headers) +
         "\r\n";
}

std::string post(std::string_view target, std::string_view body) {
  return "POST " + std::string(target) +
         " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + std::string(body);
}

// Answers every request at once with its own method, target, body and one header.
http_handler echo_handler() {
  return [](std::shared_ptr<http_exchange> ex, http_request req) {
    json j = {{"method", req.method}, {"target", req.target}, {"body", req.body}};
    if (auto it = req.headers.find("x-test"); it != req.headers.end()) j["x-test"] = it->second;
    ex->respond(200, "application/json", j.dump());
  };
}

json read_json_response(raw_client& client, unsigned expected_status) {
  response_reader r(client);
  r.finish();
  EXPECT_EQ(r.status(), expected_status) << r.message().body();
  return json::parse(r.message().body());
}

void expect_error_then_close(raw_client& client, unsigned status) {
  response_reader r(client);
  r.finish();
  EXPECT_EQ(r.status(), status);
  EXPECT_EQ(r.field(http::field::content_type), "application/json");
  const json body = json::parse(r.message().body());
  EXPECT_TRUE(body["error"]["message"].is_string()) << r.message().body();
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_FALSE(r.message().keep_alive());
  EXPECT_TRUE(client.closed_by_server());
}

} // namespace

TEST(http_server, plain_get_and_post) {
  http_server server(test_options(), echo_handler());
  server.start();
  ASSERT_NE(server.port(), 0);
  raw_client client(server.port());
  client.send(get("/v1/models?x=1", "X-Test: yes\r\n"));
  json j = read_json_response(client, 200);
  EXPECT_EQ(j["method"], "GET");
  EXPECT_EQ(j["target"], "/v1/models?x=1");
  EXPECT_EQ(j["x-test"], "yes"); // header names arrive lower-cased
  client.send(post("/v1/completions", R"({"prompt":"hi"})"));
  j = read_json_response(client, 200);
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["body"], R"({"prompt":"hi"})");
}

TEST(http_server, keep_alive_serves_requests_in_order_one_at_a_time) {
  inbox requests;
  http_server server(test_options(), requests.handler());
  server.start();
  raw_client client(server.port());
  // Two pipelined requests in one write: the second reaches the handler only once the first
  // exchange has ended.
  client.send(get("/first") + get("/second"));
  received first = requests.pop();
  EXPECT_EQ(first.request.target, "/first");
  std::jthread answer([&] { first.exchange->respond(200, "text/plain", "one"); });
  received second = requests.pop();
  answer.join();
  EXPECT_TRUE(first.exchange->finished());
  EXPECT_EQ(second.request.target, "/second");
  second.exchange->respond(201, "text/plain", "two");

  response_reader r1(client);
  r1.finish();
  EXPECT_EQ(r1.status(), 200u);
  EXPECT_EQ(r1.message().body(), "one");
  EXPECT_TRUE(r1.message().keep_alive());
  response_reader r2(client);
  r2.finish();
  EXPECT_EQ(r2.status(), 201u);
  EXPECT_EQ(r2.message().body(), "two");
}

TEST(http_server, connection_close_and_http_1_0_end_with_the_response) {
  http_server server(test_options(), echo_handler());
  server.start();
  {
    raw_client client(server.port());
    client.send(get("/a", "Connection: close\r\n"));
    response_reader r(client);
    r.finish();
    EXPECT_EQ(r.status(), 200u);
    EXPECT_FALSE(r.message().keep_alive());
    EXPECT_TRUE(client.closed_by_server());
  }
  {
    raw_client client(server.port());
    client.send("GET /b HTTP/1.0\r\n\r\n");
    response_reader r(client);
    r.finish();
    EXPECT_EQ(r.status(), 200u);
    EXPECT_EQ(r.message().version(), 10u);
    EXPECT_TRUE(client.closed_by_server());
  }
}

TEST(http_server, sse_stream_answered_from_another_thread) {
  inbox requests;
  http_server server(test_options(), requests.handler());
  server.start();
  raw_client client(server.port());
  client.send(post("/v1/completions", R"({"stream":true})"));
  received req = requests.pop();

  response_reader r(client);
  std::vector<std::promise<void>> sent(5);
  std::jthread producer([&] {
    for (int i = 0; i < 5; ++i) {
      req.exchange->send_event("{\"n\":" + std::to_string(i) + "}");
      sent[i].set_value();
    }
  });
  sent[0].get_future().wait(); // the header goes out with the first event
  r.header();
  EXPECT_EQ(r.status(), 200u);
  EXPECT_EQ(r.field(http::field::content_type), "text/event-stream");
  EXPECT_EQ(r.field(http::field::cache_control), "no-cache");
  EXPECT_TRUE(r.message().chunked());
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(r.next_chunk(), "data: {\"n\":" + std::to_string(i) + "}\n\n");
  producer.join();
  // One event at a time now: each arrives before the next is sent.
  for (int i = 5; i < 8; ++i) {
    req.exchange->send_event(std::to_string(i));
    EXPECT_EQ(r.next_chunk(), "data: " + std::to_string(i) + "\n\n");
  }
  req.exchange->send_event("line1\nline2"); // a payload newline must not end the event
  EXPECT_EQ(r.next_chunk(), "data: line1\ndata: line2\n\n");
  EXPECT_FALSE(req.exchange->finished());
  std::thread([&] { req.exchange->end_stream(); }).join();
  r.finish();
  EXPECT_TRUE(req.exchange->finished());
  EXPECT_TRUE(r.message().keep_alive());
  // Nothing is written after the end, and the connection serves the next request.
  req.exchange->send_event("late");
  req.exchange->respond(500, "text/plain", "late");
  client.send(get("/next"));
  received next = requests.pop();
  EXPECT_EQ(next.request.target, "/next");
  next.exchange->respond(200, "text/plain", "ok");
  response_reader r2(client);
  r2.finish();
  EXPECT_EQ(r2.message().body(), "ok");
}

TEST(http_server, respond_after_events_ends_the_stream) {
  inbox requests;
  http_server server(test_options(), requests.handler());
  server.start();
  raw_client client(server.port());
  client.send(get("/stream"));
  received req = requests.pop();
  req.exchange->send_event("a");
  req.exchange->respond(500, "application/json", "{}");
  response_reader r(client);
  r.finish();
  EXPECT_EQ(r.status(), 200u);
  EXPECT_EQ(r.chunks(), std::vector<std::string>{"data: a\n\n"});
}

TEST(http_server, oversized_body_is_413_without_reading_it) {
  http_server_options o = test_options();
  o.max_body_bytes = 1024;
  std::atomic<int> handled{0};
  http_server server(o, [&](std::shared_ptr<http_exchange> ex, http_request) {
    ++handled;
    ex->respond(200, "text/plain", "");
  });
  server.start();
  {
    raw_client client(server.port());
    client.send("POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Length: 100000000\r\n\r\n" +
                std::string(4096, 'x'));
    expect_error_then_close(client, 413);
  }
  {
    // With Expect: 100-continue the client learns before sending anything.
    raw_client client(server.port());
    client.send(
        "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2048\r\nExpect: 100-continue\r\n\r\n");
    expect_error_then_close(client, 413);
  }
  {
    // A body within the limit after 100 Continue.
    raw_client client(server.port());
    client.send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
    response_reader cont(client);
    cont.header();
    EXPECT_EQ(cont.status(), 100u);
    client.send("abc");
    response_reader r(client);
    r.finish();
    EXPECT_EQ(r.status(), 200u);
  }
  EXPECT_EQ(handled, 1);
}

TEST(http_server, garbage_is_400_then_close) {
  http_server server(test_options(), echo_handler());
  server.start();
  raw_client client(server.port());
  client.send("\x16\x03\x01\x02\x00 garbage\r\n\r\n");
  expect_error_then_close(client, 400);
}

TEST(http_server, oversized_header_is_431) {
  http_server_options o = test_options();
  o.max_header_bytes = 2048;
  http_server server(o, echo_handler());
  server.start();
  raw_client client(server.port());
  client.send(get("/", "X-Big: " + std::string(4096, 'a') + "\r\n"));
  expect_error_then_close(client, 431);
}

TEST(http_server, handler_exception_becomes_500_without_its_text) {
  http_server_options o = test_options();
  o.log = supernode::log::logger("gateway-7");
  http_server server(o, [](std::shared_ptr<http_exchange>, http_request) {
    throw std::runtime_error("cannot open /tmp/secret/run/ipc.sock");
  });
  server.start();
  raw_client client(server.port());
  client.send(get("/"));
  const json j = read_json_response(client, 500);
  // The exception's text goes to the log; the client learns the instance and the code.
  const auto message = j["error"]["message"].get<std::string>();
  EXPECT_EQ(message.find("/tmp"), std::string::npos) << message;
  EXPECT_NE(message.find("gateway-7"), std::string::npos) << message;
  EXPECT_EQ(j["error"]["code"], "internal_error");
}

TEST(http_server, disconnect_mid_stream_fires_the_handler) {
  inbox requests;
  http_server server(test_options(), requests.handler());
  server.start();
  raw_client client(server.port());
  client.send(get("/stream"));
  received req = requests.pop();
  signal_count disconnects;
  req.exchange->set_disconnect_handler(disconnects.increment());
  req.exchange->send_event("first");
  response_reader r(client);
  EXPECT_EQ(r.next_chunk(), "data: first\n\n");
  client.close();
  ASSERT_TRUE(disconnects.wait_for(1));
  EXPECT_TRUE(req.exchange->finished());
  // Writing to the departed client is harmless, and the handler does not fire twice.
  req.exchange->send_event("after");
  req.exchange->end_stream();
  EXPECT_EQ(disconnects.count(), 1);
}

TEST(http_server, writing_to_a_reset_connection_neither_crashes_nor_raises_sigpipe) {
  inbox requests;
  http_server server(test_options(), requests.handler());
  server.start();
  raw_client client(server.port());
  client.send(get("/stream"));
  received req = requests.pop();
  signal_count disconnects;
  req.exchange->set_disconnect_handler(disconnects.increment());
  const std::string payload(1024, 'x');
  std::atomic<bool> producing{true};
  std::jthread producer([&] {
    while (producing && !req.exchange->finished()) req.exchange->send_event(payload);
  });
  response_reader r(client);
  EXPECT_EQ(r.next_chunk(), "data: " + payload + "\n\n");
  client.reset(); // RST while the server keeps writing
  ASSERT_TRUE(disconnects.wait_for(1));
  producing = false;
  producer.join();
  EXPECT_TRUE(req.exchange->finished());
  EXPECT_EQ(disconnects.count(), 1);
}

TEST(http_server, disconnect_before_any_response_is_noticed_without_writing) {
  inbox requests;
  http_server server(test_options(), requests.handler());
  server.start();
  raw_client client(server.port());
  client.send(post("/v1/chat/completions", "{}"));
  received req = requests.pop();
  signal_count disconnects;
  req.exchange->set_disconnect_handler(disconnects.increment());
  client.close(); // nothing was ever written: only the pending read can notice this
  ASSERT_TRUE(disconnects.wait_for(1));
  EXPECT_TRUE(req.exchange->finished());
  // A handler set after the client left runs at once.
  signal_count late;
  req.exchange->set_disconnect_handler(late.increment());
  EXPECT_TRUE(late.wait_for(1));
}

TEST(http_server, a_finished_exchange_never_reports_a_disconnect) {
  inbox requests;
  http_server server(test_options(), requests.handler());
  server.start();
  signal_count disconnects;
  {
    raw_client client(server.port());
    client.send(get("/"));
    received req = requests.pop();
    req.exchange->set_disconnect_handler(disconnects.increment());
    req.exchange->respond(200, "text/plain", "done");
    response_reader r(client);
    r.finish();
    // The client leaves after its answer; whether the server notices this before stop() or
    // during it, the exchange had ended and must stay silent.
  }
  raw_client other(server.port());
  other.send(get("/other"));
  received req = requests.pop();
  req.exchange->respond(200, "text/plain", "");
  server.stop();
  EXPECT_EQ(disconnects.count(), 0);
}

TEST(http_server, two_hundred_concurrent_connections_on_one_thread) {
  http_server_options o = test_options();
  o.threads = 1;
  o.max_connections_per_client = 200;
  inbox requests;
  http_server server(o, requests.handler());
  server.start();
  constexpr int n = 200;
  std::vector<std::unique_ptr<raw_client>> clients;
  for (int i = 0; i < n; ++i) {
    clients.push_back(std::make_unique<raw_client>(server.port()));
    clients.back()->send(get("/c/" + std::to_string(i)));
  }
  // All 200 are open at once before any is answered; answer them from this thread.
  std::vector<received> pending;
  for (int i = 0; i < n; ++i) pending.push_back(requests.pop());
  for (auto& p : pending) p.exchange->respond(200, "text/plain", p.request.target);
  for (int i = 0; i < n; ++i) {
    response_reader r(*clients[i]);
    r.finish();
    EXPECT_EQ(r.status(), 200u);
    EXPECT_EQ(r.message().body(), "/c/" + std::to_string(i));
  }
  EXPECT_EQ(server.connection_count(), static_cast<size_t>(n));
}

TEST(http_server, too_many_connections_are_refused_with_503) {
  http_server_options o = test_options();
  o.max_connections = 1;
  inbox requests;
  http_server server(o, requests.handler());
  server.start();
  raw_client first(server.port());
  first.send(get("/"));
  received req = requests.pop(); // the first connection is registered by now
  raw_client second(server.port());
  response_reader r(second);
  r.finish();
  EXPECT_EQ(r.status(), 503u);
  EXPECT_EQ(json::parse(r.message().body())["error"]["type"], "server_error");
  req.exchange->respond(200, "text/plain", "");
}

TEST(http_server, stop_with_pending_exchanges_fires_their_disconnect_handlers) {
  inbox requests;
  http_server_options o = test_options();
  o.threads = 2;
  auto server = std::make_unique<http_server>(o, requests.handler());
  server->start();
  signal_count disconnects;
  std::vector<std::unique_ptr<raw_client>> clients;
  std::vector<received> pending;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<raw_client>(server->port()));
    clients.back()->send(get("/pending"));
    pending.push_back(requests.pop());
    pending.back().exchange->set_disconnect_handler(disconnects.increment());
  }
  pending[0].exchange->send_event("streaming"); // one mid-stream, two not yet answered
  server->stop();
  EXPECT_EQ(disconnects.count(), 3);
  EXPECT_EQ(server->connection_count(), 0u);
  server->stop(); // idempotent
  // Exchanges outlive the server safely.
  server.reset();
  for (auto& p : pending) {
    EXPECT_TRUE(p.exchange->finished());
    p.exchange->respond(200, "text/plain", "too late");
    signal_count late;
    p.exchange->set_disconnect_handler(late.increment());
    EXPECT_EQ(late.count(), 1);
  }
}

TEST(http_server, binding_a_port_in_use_names_it) {
  http_server first(test_options(), echo_handler());
  first.start();
  http_server_options o = test_options();
  o.port = first.port();
  http_server second(o, echo_handler());
  try {
    second.start();
    FAIL() << "bound a port already in use";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("127.0.0.1:" + std::to_string(first.port())), std::string::npos) << what;
    EXPECT_NE(what.find("in use"), std::string::npos) << what;
  }
}

TEST(http_server, idle_connections_are_closed) {
  http_server_options o = test_options();
  o.idle_timeout = std::chrono::seconds(1);
  http_server server(o, echo_handler());
  server.start();
  raw_client silent(server.port());
  EXPECT_TRUE(silent.closed_by_server()); // blocks until the server gives up on it
  raw_client answered(server.port());
  answered.send(get("/"));
  read_json_response(answered, 200);
  EXPECT_TRUE(answered.closed_by_server()); // idle again after its response
}

TEST(http_server, restarts_after_stop) {
  http_server server(test_options(), echo_handler());
  server.start();
  server.stop();
  server.start();
  raw_client client(server.port());
  client.send(get("/again"));
  EXPECT_EQ(read_json_response(client, 200)["target"], "/again");
}

// Half a request header, then nothing: 408 once header_timeout has passed since its first byte,
// then the connection closes. A connection that sent nothing is idle, not slow: the header
// timeout does not close it.
TEST(http_server, a_header_not_complete_in_time_is_408_then_close) {
  http_server_options o = test_options();
  o.header_timeout = std::chrono::milliseconds(300);
  o.idle_timeout = std::chrono::seconds(60);
  http_server server(o, echo_handler());
  server.start();
  raw_client idle(server.port());
  raw_client slow(server.port());
  slow.send("GET /slow HTTP/1.1\r\nHost: te");
  expect_error_then_close(slow, 408); // blocks until the server answers
  idle.send(get("/idle"));
  EXPECT_EQ(read_json_response(idle, 200)["target"], "/idle");
}

// One address opening 1,100 connections gets max_connections_per_client (64) of them; the rest
// are answered 429 and closed, and count against nobody's max_connections (1024): a client from
// another address (127.0.0.2, still loopback) is served.
TEST(http_server, one_address_cannot_take_every_connection) {
  constexpr size_t flood = 1100; // two descriptors each (both ends live in this process)
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur < 2 * flood + 256) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, 2 * flood + 256);
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
  ASSERT_GE(files.rlim_cur, 2 * flood + 256) << "RLIMIT_NOFILE's hard limit is too low";
  http_server_options o = test_options();
  ASSERT_EQ(o.max_connections_per_client, 64u);
  ASSERT_EQ(o.max_connections, 1024u);
  http_server server(o, echo_handler());
  server.start();
  std::vector<std::unique_ptr<raw_client>> clients;
  for (size_t i = 0; i < flood; ++i) clients.push_back(std::make_unique<raw_client>(server.port()));
  // Accepted in order: once the last one has its 429, every earlier one was decided.
  {
    response_reader last(*clients.back());
    last.finish();
    EXPECT_EQ(last.status(), 429u) << last.message().body();
  }
  response_reader refused(*clients[64]);
  refused.finish();
  EXPECT_EQ(refused.status(), 429u);
  raw_client other(server.port(), "127.0.0.2");
  other.send(get("/other"));
  EXPECT_EQ(read_json_response(other, 200)["target"], "/other");
  clients[0]->send(get("/first")); // the admitted ones still work
  EXPECT_EQ(read_json_response(*clients[0], 200)["target"], "/first");
}
