#pragma once
// The gateway's HTTP/1.1 server (Boost.Beast, C++20 coroutines) on io threads of its own. It
// knows nothing of the API: each request goes to one handler with an exchange object through
// which the answer is given later, from any thread, either whole or as a Server-Sent Events
// stream. The server itself only answers what never reaches the handler: bodies over the limit
// (413), headers over the limit (431), malformed HTTP (400), a header not complete within
// header_timeout (408), too many connections from one client address (429) or in all (503).
// Connections refused for their address do not count against max_connections, so one client
// cannot take every slot.
//
// Connection lifecycle:
//   idle --(first byte)--> reading header --(complete)--> reading body --> exchange open
//    |                        |                               |                |
//    +-- idle_timeout: closed +-- header_timeout: 408, closed +-- idle_timeout  |
//   exchange open --(respond/end_stream)--> writing --> idle (keep-alive)
//        +-- client gone --> disconnect handler, closed
// While an exchange is open a read stays pending on the socket, so a client that leaves is
// noticed at once rather than on the next write. A pipelined next request that arrives meanwhile
// is kept, unparsed, until the exchange ends (responses go out in request order).

#include "log/log.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace supernode::services::gateway {

struct http_request {
  std::string method; // "GET", "POST", ...
  std::string target; // path and query, as sent
  std::string body;
  std::map<std::string, std::string> headers; // names lower-cased; repeated fields joined by ", "
};

using header_fields = std::vector<std::pair<std::string, std::string>>;

// One request awaiting its response. Every member is thread-safe: the writes are posted to the
// connection's io thread, in call order. Calls after the exchange ended do nothing.
class http_exchange {
public:
  virtual ~http_exchange() = default;

  // A complete response; ends the exchange. If an event stream was already started its status
  // can no longer change, so the stream is ended instead.
  virtual void respond(unsigned status, std::string content_type, std::string body) = 0;

  // Server-Sent Events: the first call writes a 200 header (text/event-stream, no-cache,
  // chunked); each call writes "data: <payload>\n\n" as one chunk.
  virtual void send_event(std::string payload) = 0;

  // The same with extra header fields (Retry-After, WWW-Authenticate, ...).
  virtual void respond(unsigned status, std::string content_type, std::string body,
                       const header_fields& extra) = 0;

  // Ends the event stream (the last chunk) and the exchange.
  virtual void end_stream() = 0;

  // `fn` runs once, on an io thread, if the client goes away (or the server stops) before the
  // exchange ended; never after it ended. If the client is already gone it runs at once (on the
  // calling thread when the server no longer exists). A client that shuts down its sending side
  // after the request counts as gone, as in uvicorn: HTTP clients that wait for an answer keep
  // both directions open.
  virtual void set_disconnect_handler(std::function<void()> fn) = 0;

  // True once respond() or end_stream() was called, or the client went away: nothing more will
  // reach the client.
  virtual bool finished() const = 0;
};

// A literal IP on the loopback network (127.0.0.0/8, ::1) or "localhost".
bool is_loopback_host(const std::string& host);

// Runs on an io thread; it must not block, and may answer later from any thread.
using http_handler = std::function<void(std::shared_ptr<http_exchange>, http_request)>;

struct http_server_options {
  std::string host = "127.0.0.1";
  uint16_t port = 8000; // 0: any free port, see http_server::port()
  size_t max_body_bytes = 1 << 20;
  size_t max_header_bytes = 16 << 10; // request line and fields
  int threads = 1;
  size_t max_connections = 1024;          // more are answered 503 and closed
  size_t max_connections_per_client = 64; // per remote address; more are answered 429, closed
  std::chrono::milliseconds header_timeout{
      10000};                                    // from a request's first byte to its header's end
  std::chrono::milliseconds idle_timeout{60000}; // between requests, and to receive a body
  log::logger log; // the owning instance (the gateway), for the I/O threads' lines
};

class http_server {
public:
  http_server(http_server_options options, http_handler handler);
  ~http_server(); // stop()s
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  // Binds, listens and starts the io threads. Throws std::runtime_error naming host:port and the
  // OS reason when it cannot bind.
  void start();

  // The bound port (the OS's choice when options.port was 0); 0 before start().
  uint16_t port() const;

  // Closes the listener and every connection, fires the disconnect handlers of unfinished
  // exchanges and joins the io threads. Idempotent; start() may follow. Not from an io thread
  // (a handler or disconnect handler): it waits for them.
  void stop();

  // Open connections right now (for metrics and tests).
  size_t connection_count() const;

  struct shared_state; // what connections share with the server; public for them only

private:
  std::shared_ptr<shared_state> state_;
};

} // namespace supernode::services::gateway
