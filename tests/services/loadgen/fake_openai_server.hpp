#pragma once
// A tiny OpenAI-compatible server for the load generator's tests: /v1/models, and streamed
// /v1/completions that send exactly max_tokens token events, a usage event and [DONE], cut into
// HTTP chunks in different ways per request so the client's incremental parsing is exercised.
// Runs on its own io thread; every request can be told to misbehave instead.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace supernode::tests::loadgen {

enum class fake_reply {
  stream,     // a well-formed stream
  overloaded, // 429 with an OpenAI error body
  truncated,  // half the events, then the connection closes without [DONE]
  malformed,  // an event whose data is not JSON
  silent,     // reads the request and never answers (for the client's timeout)
};

struct fake_server_options {
  // How to answer the nth completion request received (1-based).
  std::function<fake_reply(int64_t nth)> reply_for = [](int64_t) { return fake_reply::stream; };
  // Hold every answer until this many completion requests are open at once (0: never hold),
  // which proves the client really keeps that many in flight.
  int64_t first_wave = 0;
  std::string model_id = "fake-model";
  int64_t max_model_len = 4096;
};

class fake_openai_server {
public:
  explicit fake_openai_server(fake_server_options options);
  ~fake_openai_server();
  fake_openai_server(const fake_openai_server&) = delete;
  fake_openai_server& operator=(const fake_openai_server&) = delete;

  uint16_t port() const;
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }
  int64_t completions_received() const;
  int64_t max_open_streams() const;
  // Completion requests whose JSON lacked a field the benchmark must send.
  int64_t bad_requests() const;

private:
  struct state;
  std::unique_ptr<state> state_;
};

} // namespace supernode::tests::loadgen
