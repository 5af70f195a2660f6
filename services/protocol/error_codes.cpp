#include "services/protocol/error_codes.hpp"

#include "transport/plane.hpp"

#include <algorithm>
#include <array>
#include <ostream>

namespace supernode::services::protocol {

namespace {
constexpr auto T = "transport", S = "serving", E = "ems", P = "expert_parallel";
// One row per code, sorted by code (describe_error searches it).
constexpr std::array codes{
    error_code_info{1001, T, "send_queue_full", true,
                    "the peer's bounded queue stayed full until the deadline"},
    error_code_info{1002, T, "unknown_peer", true, "no endpoint for that instance"},
    error_code_info{1003, T, "peer_down", true, "the peer is known to be dead"},
    error_code_info{1004, T, "message_too_large", false,
                    "the message exceeds its type's size limit"},
    error_code_info{1005, T, "plane_closed", true, "the plane is shutting down"},
    error_code_info{1006, T, "timeout", true, "no answer within the deadline"},
    error_code_info{2001, S, "queue_full", true, "the scheduler's admission queue is full"},
    error_code_info{2002, S, "no_decode_instance", true, "no decode instance is alive or serving"},
    error_code_info{2003, S, "no_prefill_instance", true,
                    "no prefill instance is alive or serving"},
    error_code_info{2004, S, "kv_capacity_exceeded", false,
                    "the request needs more KV than any decode instance holds"},
    error_code_info{2005, S, "invalid_request", false,
                    "empty prompt, max_tokens below 1, or a malformed field"},
    error_code_info{2006, S, "duplicate_request", false, "the same request was assigned twice"},
    error_code_info{2007, S, "kv_exhausted", true, "no free KV blocks on this instance right now"},
    error_code_info{2008, S, "instance_unavailable", true,
                    "the instance takes no requests (its group broke)"},
    error_code_info{2009, S, "instance_down", true, "an instance holding the request went down"},
    error_code_info{2010, S, "prefill_failed", true, "the prefill computation failed"},
    error_code_info{2011, S, "cancelled", false, "the client cancelled or went away"},
    error_code_info{2012, S, "shutting_down", true, "the instance is stopping"},
    error_code_info{2013, S, "kv_layout_mismatch", false,
                    "prefill and decode disagree on the KV block shape"},
    error_code_info{2014, S, "internal_error", false, "an exception nobody expected (a bug)"},
    error_code_info{2015, S, "delivery_failed", true, "tokens or KV could not be delivered"},
    error_code_info{2016, S, "no_scheduler", true, "no scheduler is alive"},
    error_code_info{2017, S, "too_many_requests", true, "the gateway's in-flight limit is reached"},
    error_code_info{2018, S, "context_length_exceeded", false,
                    "prompt (+ max_tokens) beyond the model's context"},
    error_code_info{2019, S, "model_not_found", false,
                    "the request names a model this cluster does not serve"},
    error_code_info{2020, S, "invalid_api_key", false,
                    "no `Authorization: Bearer` key, or one the gateway does not know"},
    error_code_info{2021, S, "key_concurrency_limit_exceeded", true,
                    "the API key's max_concurrent requests are in flight"},
    error_code_info{2022, S, "key_token_rate_limit_exceeded", true,
                    "the API key's tokens_per_minute are used up for now"},
    error_code_info{2023, S, "sequence_moved", true,
                    "its decode instance is draining: the sequence moves on with its KV"},
    error_code_info{3001, E, "pool_server_unreachable", true,
                    "the MP server or controller is down or did not answer"},
    error_code_info{3002, E, "pool_quota_exceeded", false,
                    "the namespace's quota cannot hold the value"},
    error_code_info{3003, E, "pool_malformed_request", false,
                    "sizes and keys disagree, or a value runs past the data"},
    error_code_info{3004, E, "pool_storage_failed", true,
                    "the SSD tier could not write (disk full, I/O error)"},
    error_code_info{3005, E, "pool_corrupt_block", true, "a stored block failed its checksum"},
    error_code_info{3006, E, "pool_value_too_large", false, "a value larger than a tier can hold"},
    error_code_info{3007, E, "model_fetch_failed", true,
                    "a model fetch from object storage failed"},
    error_code_info{4001, P, "expert_group_broken", true,
                    "a rank of the expert-parallel group is down or silent"},
    error_code_info{4002, P, "expert_peer_timeout", true,
                    "a peer did not answer an operation in time"},
};
static_assert(std::is_sorted(codes.begin(), codes.end(),
                             [](auto& a, auto& b) { return a.code < b.code; }));
} // namespace

std::span<const error_code_info> all_error_codes() {
  return codes;
}

const error_code_info& describe_error(uint16_t code) {
  static const error_code_info ok{0, "", "ok", false};
  static const error_code_info unknown{0, "unknown", "unknown", false};
  if (code == 0) return ok;
  auto it = std::lower_bound(codes.begin(), codes.end(), code,
                             [](const error_code_info& i, uint16_t c) { return i.code < c; });
  return it != codes.end() && it->code == code ? *it : unknown;
}

transport_errc errc_of(transport::send_status status) {
  using s = transport::send_status;
  switch (status) {
  case s::queue_full:
    return transport_errc::queue_full;
  case s::unknown_peer:
    return transport_errc::unknown_peer;
  case s::peer_down:
    return transport_errc::peer_down;
  case s::too_large:
    return transport_errc::too_large;
  case s::closed:
  case s::ok:
    break;
  }
  return transport_errc::closed;
}

std::string error::str() const {
  return std::string(name()) + " (" + std::to_string(code) + "): " + message;
}

std::ostream& operator<<(std::ostream& os, const error& e) {
  return os << e.str();
}

const char* to_string(finish_reason f) {
  switch (f) {
  case finish_reason::none:
    return "";
  case finish_reason::stop:
    return "stop";
  case finish_reason::length:
    return "length";
  case finish_reason::cancelled:
    return "cancelled";
  case finish_reason::error:
    return "error";
  }
  return "";
}

} // namespace supernode::services::protocol
