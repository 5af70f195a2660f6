#pragma once
// The messages of the EMS memory pool (protocol version 1), one section per receiving role.
// Type ids 200-229. Every request carries the client's `request_id`; its reply carries it back
// as `reply_to`, and the receiving endpoint completes the client's pending request with it on
// the plane thread (no actor in between), so a client may wait for replies from any thread.
//
//   client        -> mp_controller : ems_ring_request, ems_model_claim, ems_model_register
//   mp_server     -> mp_controller : ems_ring_request (`leaving`: a drain), ems_server_report
//                                    (what it holds), ems_handover_done
//   mp_controller -> client        : ems_ring_view (also pushed on every change),
//                                    ems_model_claimed, ems_model_registered
//   mp_controller -> mp_server     : ems_ring_view (pushed), ems_ring_target (a ring change to
//                                    hand blocks over for), ems_remove (model eviction)
//   client        -> mp_server     : ems_put, ems_get, ems_exists, ems_remove, ems_list
//   mp_server     -> mp_server     : ems_put (the blocks a ring change moves), ems_put_reply
//   mp_server     -> client        : ems_put_reply, ems_get_reply, ems_exists_reply,
//                                    ems_remove_reply, ems_list_reply
//   mp_server     -> scheduler     : load_report (role "mp_server", tier statistics)

#include "services/protocol/error_codes.hpp"
#include "transport/shared_bytes.hpp"

#include <cstdint>
#include <msgpack.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace supernode::services::protocol {

inline constexpr int ems_protocol_version = 1;

// ---- to the MP controller ----------------------------------------------------------------------

struct ems_ring_request {
  static constexpr uint16_t type_id = 200;
  static constexpr const char* type_name = "ems_ring_request";
  static constexpr uint32_t max_bytes = 4096;
  uint64_t request_id = 0;
  // From a draining MP server: take me off the ring once my blocks are with their new owners.
  bool leaving = false;
  MSGPACK_DEFINE_MAP(request_id, leaving);
};

// Who loads model `model_key` ("id@version"): see ems::model_claim.
struct ems_model_claim {
  static constexpr uint16_t type_id = 201;
  static constexpr const char* type_name = "ems_model_claim";
  static constexpr uint32_t max_bytes = 4096;
  uint64_t request_id = 0;
  std::string model_key;
  MSGPACK_DEFINE_MAP(request_id, model_key);
};

// A model is in the pool (or, with `failed`, its fetch failed and the claim passes on).
struct ems_model_register {
  static constexpr uint16_t type_id = 202;
  static constexpr const char* type_name = "ems_model_register";
  static constexpr uint32_t max_bytes = 64u << 20;
  uint64_t request_id = 0;
  std::string model_key;
  std::string ns;
  std::vector<std::string> block_keys;
  uint64_t bytes = 0;
  error failed; // ok: registered
  transport::shared_bytes manifest;
  MSGPACK_DEFINE_MAP(request_id, model_key, ns, block_keys, bytes, failed, manifest);
};

// One namespace on one MP server.
struct ems_namespace_usage {
  std::string ns;
  uint64_t bytes = 0;
  uint64_t blocks = 0;
  MSGPACK_DEFINE_MAP(ns, bytes, blocks);
  bool operator==(const ems_namespace_usage&) const = default;
};

// A model whose manifest block a server holds (its key is ems::model_manifest_key(model_key)).
struct ems_model_entry {
  std::string model_key;
  std::string ns;
  std::vector<char> manifest; // the registered manifest's bytes
  MSGPACK_DEFINE_MAP(model_key, ns, manifest);
};

// What an MP server holds, so a restarted controller rebuilds its metadata from the servers:
// in full (with the model manifests) the first time the server sees a controller incarnation,
// and every few heartbeats after with the usage only.
struct ems_server_report {
  static constexpr uint16_t type_id = 203;
  static constexpr const char* type_name = "ems_server_report";
  static constexpr uint32_t max_bytes = 64u << 20;
  uint64_t incarnation = 0; // the controller's, from its ring views: a report for that one
  bool full = false;
  std::vector<ems_namespace_usage> namespaces;
  std::vector<ems_model_entry> models; // when full
  MSGPACK_DEFINE_MAP(incarnation, full, namespaces, models);
};

// An MP server handed over every block the ring change `target_version` moves away from it (or
// gave up on some: `failed`, lost to the cache).
struct ems_handover_done {
  static constexpr uint16_t type_id = 204;
  static constexpr const char* type_name = "ems_handover_done";
  static constexpr uint32_t max_bytes = 4096;
  uint64_t target_version = 0;
  uint64_t blocks_sent = 0;
  uint64_t blocks_failed = 0;
  uint64_t blocks_unreachable = 0; // of those failed, sent to an owner not reachable (yet)
  MSGPACK_DEFINE_MAP(target_version, blocks_sent, blocks_failed, blocks_unreachable);
};

// ---- from the MP controller --------------------------------------------------------------------

// The ring: MP servers by instance name, in any order (the ring sorts them), and each namespace's
// quota per server (the pool's quota split evenly over the servers on the ring).
struct ems_ring_view {
  static constexpr uint16_t type_id = 205;
  static constexpr const char* type_name = "ems_ring_view";
  static constexpr uint32_t max_bytes = 1u << 20;
  uint64_t reply_to = 0; // 0: pushed after a change
  uint64_t version = 0;
  int32_t vnodes = 64;
  std::vector<std::string> servers;
  std::vector<std::pair<std::string, uint64_t>> quotas;
  uint64_t incarnation = 0; // the controller's: a new one has not heard the servers' reports
  MSGPACK_DEFINE_MAP(reply_to, version, vnodes, servers, quotas, incarnation);
};

// The ring the controller will publish next (servers only): each server hands the blocks it owns
// under `current_servers` to the servers that own them under `servers` and are not owners now,
// then answers ems_handover_done. Clients keep reading with the current ring meanwhile.
struct ems_ring_target {
  static constexpr uint16_t type_id = 208;
  static constexpr const char* type_name = "ems_ring_target";
  static constexpr uint32_t max_bytes = 1u << 20;
  uint64_t version = 0; // the ring view's version once published
  int32_t vnodes = 64;
  int32_t copies = 1; // owners per key ([ems] replicas, at most one per server)
  std::vector<std::string> current_servers;
  std::vector<std::string> servers;
  MSGPACK_DEFINE_MAP(version, vnodes, copies, current_servers, servers);
};

struct ems_model_claimed {
  static constexpr uint16_t type_id = 206;
  static constexpr const char* type_name = "ems_model_claimed";
  static constexpr uint32_t max_bytes = 64u << 20;
  uint64_t reply_to = 0;
  bool ready = false; // false: the asker fetches the model and registers it
  transport::shared_bytes manifest;
  MSGPACK_DEFINE_MAP(reply_to, ready, manifest);
};

struct ems_model_registered {
  static constexpr uint16_t type_id = 207;
  static constexpr const char* type_name = "ems_model_registered";
  static constexpr uint32_t max_bytes = 4096;
  uint64_t reply_to = 0;
  std::vector<std::string> evicted; // models removed whole to make room
  MSGPACK_DEFINE_MAP(reply_to, evicted);
};

// ---- to an MP server ---------------------------------------------------------------------------

// Values back to back in `data`, `sizes` saying where each ends.
struct ems_put {
  static constexpr uint16_t type_id = 210;
  static constexpr const char* type_name = "ems_put";
  static constexpr uint32_t max_bytes = (256u << 20) + 65536;
  uint64_t request_id = 0; // 0: nobody waits for the reply (none is sent)
  std::string ns;
  std::vector<std::string> keys;
  std::vector<uint64_t> sizes;
  transport::shared_bytes data; // last: a spliced frame has no head part after it
  MSGPACK_DEFINE_MAP(request_id, ns, keys, sizes, data);
};

// With `by_reference`, blocks in the server's DRAM come back as places in its shared region
// (read over UB); otherwise, and for blocks not in DRAM, as bytes (VPC).
struct ems_get {
  static constexpr uint16_t type_id = 211;
  static constexpr const char* type_name = "ems_get";
  static constexpr uint32_t max_bytes = 4u << 20;
  uint64_t request_id = 0;
  std::string ns;
  std::vector<std::string> keys;
  bool by_reference = false;
  MSGPACK_DEFINE_MAP(request_id, ns, keys, by_reference);
};

struct ems_exists {
  static constexpr uint16_t type_id = 212;
  static constexpr const char* type_name = "ems_exists";
  static constexpr uint32_t max_bytes = 4u << 20;
  uint64_t request_id = 0;
  std::string ns;
  std::vector<std::string> keys;
  MSGPACK_DEFINE_MAP(request_id, ns, keys);
};

struct ems_remove {
  static constexpr uint16_t type_id = 213;
  static constexpr const char* type_name = "ems_remove";
  static constexpr uint32_t max_bytes = 16u << 20;
  uint64_t request_id = 0; // 0: no reply
  std::string ns;
  std::vector<std::string> keys;
  MSGPACK_DEFINE_MAP(request_id, ns, keys);
};

struct ems_list {
  static constexpr uint16_t type_id = 214;
  static constexpr const char* type_name = "ems_list";
  static constexpr uint32_t max_bytes = 4096;
  uint64_t request_id = 0;
  std::string ns;
  MSGPACK_DEFINE_MAP(request_id, ns);
};

// ---- from an MP server -------------------------------------------------------------------------

struct ems_put_reply {
  static constexpr uint16_t type_id = 220;
  static constexpr const char* type_name = "ems_put_reply";
  static constexpr uint32_t max_bytes = 4u << 20;
  uint64_t reply_to = 0;
  std::vector<error> errors; // per key; ok: stored and persisted
  MSGPACK_DEFINE_MAP(reply_to, errors);
};

// Per key, in request order: `sizes[i]` < 0 is a miss, except ems_ask_again: the block is there
// but did not fit this reply (the client asks for it again). A hit is either `offsets[i]` >= 0, a
// place in the region named `region` (shm, see transport::shm_region) holding `sizes[i]` bytes
// whose checksum is `checksums[i]`, or the next `sizes[i]` bytes of `data`.
inline constexpr int64_t ems_ask_again = -2;

struct ems_get_reply {
  static constexpr uint16_t type_id = 221;
  static constexpr const char* type_name = "ems_get_reply";
  static constexpr uint32_t max_bytes = (256u << 20) + 65536;
  uint64_t reply_to = 0;
  std::string region;
  std::vector<int64_t> sizes;
  std::vector<int64_t> offsets;
  std::vector<uint64_t> checksums;
  transport::shared_bytes data; // last
  MSGPACK_DEFINE_MAP(reply_to, region, sizes, offsets, checksums, data);
};

struct ems_exists_reply {
  static constexpr uint16_t type_id = 222;
  static constexpr const char* type_name = "ems_exists_reply";
  static constexpr uint32_t max_bytes = 1u << 20;
  uint64_t reply_to = 0;
  std::vector<bool> present;
  MSGPACK_DEFINE_MAP(reply_to, present);
};

struct ems_remove_reply {
  static constexpr uint16_t type_id = 223;
  static constexpr const char* type_name = "ems_remove_reply";
  static constexpr uint32_t max_bytes = 4096;
  uint64_t reply_to = 0;
  uint64_t removed = 0;
  MSGPACK_DEFINE_MAP(reply_to, removed);
};

struct ems_list_reply {
  static constexpr uint16_t type_id = 224;
  static constexpr const char* type_name = "ems_list_reply";
  static constexpr uint32_t max_bytes = 64u << 20;
  uint64_t reply_to = 0;
  std::vector<std::string> keys;
  MSGPACK_DEFINE_MAP(reply_to, keys);
};

// What a client asks of an MP server (the storage thread serves them in arrival order).
template<class T>
concept is_ems_server_request = std::is_same_v<T, ems_put> || std::is_same_v<T, ems_get> ||
    std::is_same_v<T, ems_exists> || std::is_same_v<T, ems_remove> || std::is_same_v<T, ems_list>;

// Registers every message above with the transport registry; idempotent.
void register_ems_messages();

} // namespace supernode::services::protocol
