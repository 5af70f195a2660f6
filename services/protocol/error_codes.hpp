#pragma once
// Error codes between roles: one enum per subsystem, banded by thousands, each code with a
// stable name and whether a retry on another instance can succeed (recovery decides on that
// bit, never on message text). Every reply and failure message carries a protocol::error: the
// code and a human message beside it. Only the gateway turns codes into HTTP statuses
// (services/gateway/error_mapping.cpp).
//
//   0          ok
//   1000-1999  transport   (a send or a frame failed)
//   2000-2999  serving     (admission, placement, prefill, decode)
//   3000-3999  EMS         (the memory pool)
//   4000-4999  expert parallelism

#include <cstdint>
#include <iosfwd>
#include <msgpack.hpp>
#include <span>
#include <string>
#include <type_traits>

namespace supernode::transport {
enum class send_status : uint8_t;
}

namespace supernode::services::protocol {

enum class transport_errc : uint16_t {
  queue_full = 1001,   // the peer's bounded queue stayed full
  unknown_peer = 1002, // no endpoint for that instance
  peer_down = 1003,    // the peer is known to be dead
  too_large = 1004,    // the message exceeds its type's limit
  closed = 1005,       // the plane is shutting down
  timeout = 1006,      // no answer within the deadline
};

enum class serving_errc : uint16_t {
  queue_full = 2001,              // the scheduler's admission queue is full
  no_decode_instance = 2002,      // no decode instance is alive or serving
  no_prefill_instance = 2003,     // no prefill instance is alive or serving
  kv_capacity_exceeded = 2004,    // the request needs more KV than any decode instance holds
  invalid_request = 2005,         // empty prompt, max_tokens below 1, token outside the vocabulary
  duplicate_request = 2006,       // the same request assigned twice
  kv_exhausted = 2007,            // no free KV blocks on this instance right now
  instance_unavailable = 2008,    // the instance takes no requests (its group broke)
  instance_down = 2009,           // an instance holding the request went down
  prefill_failed = 2010,          // the prefill computation failed
  cancelled = 2011,               // the client cancelled (or went away)
  shutting_down = 2012,           // the instance is stopping
  kv_layout_mismatch = 2013,      // prefill and decode disagree on the KV block shape
  internal = 2014,                // a bug: an exception nobody expected
  delivery_failed = 2015,         // tokens or KV could not be delivered
  no_scheduler = 2016,            // no scheduler is alive
  too_many_requests = 2017,       // the gateway's in-flight limit
  context_length_exceeded = 2018, // prompt (+ max_tokens) beyond the model's context
  model_not_found = 2019,         // the request names a model this cluster does not serve
  invalid_api_key = 2020,         // no API key, or one the gateway does not know
  key_concurrency_limit = 2021,   // the API key's max_concurrent requests are in flight
  key_token_rate_limit = 2022,    // the API key's tokens_per_minute are used up
  sequence_moved = 2023,          // a draining decode instance hands the sequence, with its KV, on
};

enum class ems_errc : uint16_t {
  server_unreachable = 3001, // the MP server (or controller) is down or did not answer
  quota_exceeded = 3002,     // the namespace's quota cannot hold the value
  malformed_request = 3003,  // sizes and keys disagree, a value runs past the data
  storage_failed = 3004,     // the SSD tier could not write (disk full, I/O error)
  corrupt_block = 3005,      // a stored block failed its checksum
  too_large = 3006,          // a value larger than a tier can hold
  fetch_failed = 3007,       // a model fetch from object storage failed
};

enum class ep_errc : uint16_t {
  group_broken = 4001, // a rank of the expert-parallel group is down or silent
  peer_timeout = 4002, // a peer did not answer an operation in time
};

template<class E>
concept error_enum = std::is_same_v<E, transport_errc> || std::is_same_v<E, serving_errc> ||
    std::is_same_v<E, ems_errc> || std::is_same_v<E, ep_errc>;

struct error_code_info {
  uint16_t code = 0;
  const char* subsystem = "";
  const char* name = "";        // stable, lower_snake: what clients and tests match on
  bool retry_elsewhere = false; // another instance (or a later attempt) may succeed
  const char* meaning = "";
};

// Every code, in code order (for documentation and tests).
std::span<const error_code_info> all_error_codes();
// The code's entry; an unknown code (a newer peer) answers {code, "unknown", "unknown", false}.
const error_code_info& describe_error(uint16_t code);
transport_errc errc_of(transport::send_status status); // status must not be ok

// What travels in replies and failure messages. code 0 is success.
struct error {
  uint16_t code = 0;
  std::string message;

  error() = default;
  template<error_enum E>
  error(E e, std::string text) : code(static_cast<uint16_t>(e)), message(std::move(text)) {}
  // A code as received (passed on with a new message).
  error(uint16_t c, std::string text) : code(c), message(std::move(text)) {}

  bool ok() const { return code == 0; }
  template<error_enum E>
  bool is(E e) const {
    return code == static_cast<uint16_t>(e);
  }
  const char* name() const { return describe_error(code).name; }
  bool retry_elsewhere() const { return describe_error(code).retry_elsewhere; }
  // "name (code): message", for logs.
  std::string str() const;
  MSGPACK_DEFINE_MAP(code, message);
};

std::ostream& operator<<(std::ostream& os, const error& e); // e.str()

// How a request ended, on its last token update.
enum class finish_reason : uint8_t { none = 0, stop, length, cancelled, error };
const char* to_string(finish_reason f); // "", "stop", "length", "cancelled", "error"

} // namespace supernode::services::protocol

MSGPACK_ADD_ENUM(supernode::services::protocol::finish_reason);
