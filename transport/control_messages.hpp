#pragma once
// Messages of the transport layer itself: echo (round trips, benchmarks), bulk transfers,
// membership and liveness. Type ids 1-99 belong to transport; roles take theirs from 100 up
// in their own protocol headers.

#include "transport/shared_bytes.hpp"

#include <cstdint>
#include <map>
#include <msgpack.hpp>
#include <string>
#include <vector>

namespace supernode::transport {

struct ping {
  static constexpr uint16_t type_id = 1;
  static constexpr const char* type_name = "ping";
  static constexpr uint32_t max_bytes = 1u << 20;
  uint64_t seq = 0;
  uint64_t sent_ns = 0;
  shared_bytes payload; // BIN on the wire; a pong can echo it without a copy
  MSGPACK_DEFINE_MAP(seq, sent_ns, payload);
};

struct pong {
  static constexpr uint16_t type_id = 2;
  static constexpr const char* type_name = "pong";
  static constexpr uint32_t max_bytes = 1u << 20;
  uint64_t seq = 0;
  uint64_t sent_ns = 0;
  shared_bytes payload;
  MSGPACK_DEFINE_MAP(seq, sent_ns, payload);
};

// One piece of a large transfer (a KV cache, a model block). Receivers reassemble by offset.
// `data` travels without a copy where the plane allows it and may reference the receive buffer.
struct bulk_chunk {
  static constexpr uint16_t type_id = 3;
  static constexpr const char* type_name = "bulk_chunk";
  static constexpr uint32_t max_bytes = (64u << 20) + 4096;
  uint64_t transfer_id = 0;
  uint64_t offset = 0;
  uint64_t total_bytes = 0;
  shared_bytes data; // last, so a spliced frame has no head part after it
  MSGPACK_DEFINE_MAP(transfer_id, offset, total_bytes, data);
};

struct bulk_ack {
  static constexpr uint16_t type_id = 4;
  static constexpr const char* type_name = "bulk_ack";
  static constexpr uint32_t max_bytes = 256;
  uint64_t transfer_id = 0;
  uint64_t received_bytes = 0;
  uint64_t checksum = 0; // FNV-1a of the bytes, so the sender knows they arrived intact
  MSGPACK_DEFINE_MAP(transfer_id, received_bytes, checksum);
};

struct heartbeat {
  static constexpr uint16_t type_id = 5;
  static constexpr const char* type_name = "heartbeat";
  static constexpr uint32_t max_bytes = 1024;
  std::string sender;
  uint64_t incarnation = 0; // changes when a peer restarts, so a new process is a new member
  uint64_t seq = 0;
  MSGPACK_DEFINE_MAP(sender, incarnation, seq);
};

struct member_join {
  static constexpr uint16_t type_id = 6;
  static constexpr const char* type_name = "member_join";
  static constexpr uint32_t max_bytes = 64 * 1024;
  std::string peer;
  std::string role;
  uint64_t incarnation = 0;
  std::map<std::string, std::string> endpoints; // plane name -> address
  // Asks the receiver for the members it knows (member_directory): a process that joins
  // through one live member learns the rest from it.
  bool wants_directory = false;
  MSGPACK_DEFINE_MAP(peer, role, incarnation, endpoints, wants_directory);
};

struct member_leave {
  static constexpr uint16_t type_id = 7;
  static constexpr const char* type_name = "member_leave";
  static constexpr uint32_t max_bytes = 4096;
  std::string peer;
  std::string reason;
  uint64_t incarnation = 0; // the leaving process: a late leave of a replaced one is refused
  MSGPACK_DEFINE_MAP(peer, reason, incarnation);
};

// The answer to a join that wants the directory: every live member the sender knows, itself
// included, with the addresses each announced (or the config gives), and the members it knows
// to have left (with the incarnation that left). Without those, a joiner whose config lists a
// member that left before it started would wait for that member's heartbeats and declare it
// down for silence.
struct member_directory {
  static constexpr uint16_t type_id = 9;
  static constexpr const char* type_name = "member_directory";
  static constexpr uint32_t max_bytes = 1u << 20;
  std::vector<member_join> members;
  std::vector<member_leave> left;
  MSGPACK_DEFINE_MAP(members, left);
};

// To a member whose process was declared down for silence (a hang: SIGSTOP, a stall) and then
// spoke again with the same incarnation: its peers recovered its work and refuse that
// incarnation for good. It drops what it holds and rejoins as a new process.
struct member_fenced {
  static constexpr uint16_t type_id = 8;
  static constexpr const char* type_name = "member_fenced";
  static constexpr uint32_t max_bytes = 4096;
  std::string peer;         // the fenced member (the receiver)
  uint64_t incarnation = 0; // its fenced incarnation
  std::string reason;
  MSGPACK_DEFINE_MAP(peer, incarnation, reason);
};

// Registers the types above; idempotent.
void register_control_messages();

} // namespace supernode::transport
