#pragma once
// The messages of PDC serving (protocol version 1), one section per receiving role. Every
// request is named by its gateway and the gateway's id for it, so ids never need a central
// counter and replies find their way back without a lookup. Type ids 100-199.
//
//   gateway   -> scheduler : admit_request, cancel_request
//   scheduler -> gateway   : admit_rejected, request_placed, cluster_stats
//   scheduler -> decode    : decode_assign, cancel_request
//   decode    -> scheduler : decode_assign_result, load_report
//   decode    -> prefill   : prefill_request
//   prefill   -> decode    : kv_transfer (bulk flow), prefill_failed
//   prefill   -> scheduler : load_report
//   decode    -> gateway   : token_batch
//   decode    -> decode    : prefill_request, moved_kv_received (a draining one's sequences
//                            move: it answers with kv_transfer and prefill_failed)
//   gateway   -> decode    : cancel_request, decode_batch_cap

#include "services/protocol/error_codes.hpp"
#include "transport/shared_bytes.hpp"

#include <cstdint>
#include <map>
#include <msgpack.hpp>
#include <string>
#include <tuple>
#include <vector>

namespace supernode::services::protocol {

inline constexpr int serving_protocol_version = 1;

struct request_key {
  std::string gateway;
  uint64_t id = 0; // from 1 up; 0 is never a request
  bool operator<(const request_key& o) const {
    return std::tie(gateway, id) < std::tie(o.gateway, o.id);
  }
  bool operator==(const request_key& o) const = default;
  std::string str() const { return gateway + "#" + std::to_string(id); }
  MSGPACK_DEFINE_MAP(gateway, id);
};

// What to generate: the prompt and how to sample; the same fields the reference engine takes.
struct request_spec {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;
  float temperature = 0.0f;
  float top_p = 1.0f;
  int32_t top_k = 0;
  uint64_t seed = 0;
  bool stop_at_eos = true;
  // A resumed request (its instance died, hung or failed retryably): the tokens its client has
  // already received. Generation continues after them, bit-exactly as if never interrupted: the
  // prompt is prefilled as before and these tokens are run through the decode arithmetic (one
  // multi-position step), so their KV equals the interrupted run's; the sampler is keyed by
  // seed and step. max_tokens still counts them.
  std::vector<int32_t> generated;
  MSGPACK_DEFINE_MAP(prompt, max_tokens, temperature, top_p, top_k, seed, stop_at_eos, generated);
};

// Where the KV of a sequence that moves (its decode instance drains with drain = "migrate")
// waits: the draining instance, under the key of the attempt it ran.
struct moved_kv {
  std::string instance; // empty: nothing moves (the prompt is prefilled as usual)
  request_key key;
  bool empty() const { return instance.empty(); }
  MSGPACK_DEFINE_MAP(instance, key);
};

// ---- to the scheduler ------------------------------------------------------------------------

struct admit_request {
  static constexpr uint16_t type_id = 100;
  static constexpr const char* type_name = "admit_request";
  static constexpr uint32_t max_bytes = 4u << 20;
  request_key key;
  request_spec spec;
  moved_kv moved; // a sequence moving from a draining decode instance: place it elsewhere
  MSGPACK_DEFINE_MAP(key, spec, moved);
};

struct decode_assign_result {
  static constexpr uint16_t type_id = 101;
  static constexpr const char* type_name = "decode_assign_result";
  static constexpr uint32_t max_bytes = 4096;
  request_key key;
  error refusal; // ok: accepted
  bool accepted() const { return refusal.ok(); }
  MSGPACK_DEFINE_MAP(key, refusal);
};

struct plane_traffic {
  std::string plane;
  uint64_t bytes_sent = 0, bytes_received = 0, messages_sent = 0, messages_received = 0;
  uint64_t bad_frames = 0;
  MSGPACK_DEFINE_MAP(plane, bytes_sent, bytes_received, messages_sent, messages_received,
                     bad_frames);
};

// EMS counters since start: a prefill instance fills the context-cache half, an MP server the
// tier half; /metrics shows them per instance.
struct cache_stats {
  uint64_t lookups = 0;        // prompts looked up in the context cache
  uint64_t lookup_tokens = 0;  // their prompt tokens
  uint64_t hit_tokens = 0;     // prompt tokens whose KV came from the pool
  uint64_t stored_blocks = 0;  // context blocks put into the pool
  uint64_t store_failures = 0; // puts the pool refused or never answered
  uint64_t read_errors = 0;    // lookups that failed (server down, timeout, bad block)
  double load_seconds = 0;     // spent looking up and loading cached KV
  uint64_t loaded_bytes = 0;   // KV bytes loaded from the pool
  uint64_t dram_blocks = 0, dram_bytes = 0, ssd_blocks = 0, ssd_bytes = 0;
  uint64_t dram_hits = 0, ssd_hits = 0, misses = 0, corrupt_blocks = 0;
  uint64_t evicted_dram = 0; // DRAM -> SSD tier
  uint64_t deleted_ssd = 0;  // dropped by the SSD tier's threshold
  uint64_t rejected_puts = 0;
  // Blocks a ring change moved: received from other servers, handed to them, and lost on the way.
  uint64_t handed_over_in = 0, handed_over_out = 0, handover_failed = 0;
  MSGPACK_DEFINE_MAP(lookups, lookup_tokens, hit_tokens, stored_blocks, store_failures, read_errors,
                     load_seconds, loaded_bytes, dram_blocks, dram_bytes, ssd_blocks, ssd_bytes,
                     dram_hits, ssd_hits, misses, corrupt_blocks, evicted_dram, deleted_ssd,
                     rejected_puts, handed_over_in, handed_over_out, handover_failed);
};

// Load as running totals, so the scheduler's view is exact whatever the order in which
// reports and assignments cross: outstanding = what it assigned - what the instance completed.
struct load_report {
  static constexpr uint16_t type_id = 102;
  static constexpr const char* type_name = "load_report";
  static constexpr uint32_t max_bytes = 1u << 20;
  std::string role;                    // "prefill" or "decode"
  int64_t kv_blocks_total = 0;         // decode: capacity of its KV pool
  int64_t kv_blocks_released = 0;      // decode: blocks ever returned to the pool
  int64_t kv_blocks_used = 0;          // decode: blocks reserved now (a new scheduler's baseline)
  int64_t prompt_tokens_completed = 0; // prefill: prompt tokens ever finished (or dropped)
  int64_t running = 0;                 // decode: sequences in the batch; prefill: in the batch
  int64_t waiting = 0;                 // queued (prefill) or waiting for KV (decode)
  std::vector<request_key> finished;   // decode: requests ended since the last report
  std::vector<plane_traffic> planes;
  // Why the instance takes no new requests (its expert-parallel group broke); ok: serving.
  error unavailable;
  // Expert parallelism: seconds per MoE layer and stage since start, [layer * 6 + stage] with
  // stages attention, gate, dispatch, experts, combine, idle; and forwards run. Empty for a
  // lone rank.
  std::vector<double> ep_stage_seconds;
  uint64_t ep_forwards = 0;
  cache_stats cache;
  // Messages received outside the role's interface since start, by type name.
  std::map<std::string, uint64_t> unexpected_messages;
  // Messages refused for their sender since start, by reason (endpoint::rejected_messages).
  std::map<std::string, uint64_t> rejected_messages;
  // decode: sequences that arrived with their KV from a draining instance, and that left with
  // theirs to another, since start.
  uint64_t sequences_moved_in = 0, sequences_moved_out = 0;
  // decode with MTP ([decode] mtp): tokens drafted and accepted since start, the sequence-steps
  // that drafted, and the depth of the last step (adaptive: 0 when drafting does not pay).
  uint64_t mtp_drafted = 0, mtp_accepted = 0, mtp_drafting_steps = 0;
  int64_t mtp_depth = 0;
  MSGPACK_DEFINE_MAP(role, kv_blocks_total, kv_blocks_released, kv_blocks_used,
                     prompt_tokens_completed, running, waiting, finished, planes, unavailable,
                     ep_stage_seconds, ep_forwards, cache, unexpected_messages, rejected_messages,
                     sequences_moved_in, sequences_moved_out, mtp_drafted, mtp_accepted,
                     mtp_drafting_steps, mtp_depth);
};

// Also sent to the decode instance of a placed request, and to a prefill instance.
struct cancel_request {
  static constexpr uint16_t type_id = 103;
  static constexpr const char* type_name = "cancel_request";
  static constexpr uint32_t max_bytes = 4096;
  request_key key;
  error why; // serving_errc::cancelled, or why the request cannot go on
  MSGPACK_DEFINE_MAP(key, why);
};

// ---- to the gateway --------------------------------------------------------------------------

struct admit_rejected {
  static constexpr uint16_t type_id = 110;
  static constexpr const char* type_name = "admit_rejected";
  static constexpr uint32_t max_bytes = 4096;
  request_key key;
  error why; // the gateway maps the code to its HTTP answer
  MSGPACK_DEFINE_MAP(key, why);
};

struct request_placed {
  static constexpr uint16_t type_id = 111;
  static constexpr const char* type_name = "request_placed";
  static constexpr uint32_t max_bytes = 4096;
  request_key key;
  std::string prefill; // empty: the decode instance prefills itself (colocated)
  std::string decode;
  MSGPACK_DEFINE_MAP(key, prefill, decode);
};

// One request's new tokens from one decode step; `finish` is set on its last update: stop (EOS),
// length, cancelled or error (then `failure` says why).
struct token_update {
  request_key key;
  std::vector<int32_t> tokens;
  finish_reason finish = finish_reason::none;
  error failure;
  // The index of tokens[0] in the request's generation: the gateway applies each index once,
  // so a resumed request can never repeat a token to its client.
  int64_t first_index = 0;
  MSGPACK_DEFINE_MAP(key, tokens, finish, failure, first_index);
};

// The last update of a request that ends without a new token: cancelled when the failure is
// serving_errc::cancelled, an error otherwise.
inline token_update final_update(const request_key& key, error failure) {
  token_update u;
  u.key = key;
  u.finish = failure.is(serving_errc::cancelled) ? finish_reason::cancelled : finish_reason::error;
  u.failure = std::move(failure);
  return u;
}

struct token_batch {
  static constexpr uint16_t type_id = 112;
  static constexpr const char* type_name = "token_batch";
  static constexpr uint32_t max_bytes = 16u << 20;
  std::vector<token_update> updates;
  MSGPACK_DEFINE_MAP(updates);
};

struct instance_stats {
  std::string name;
  std::string role;
  bool alive = true;
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t outstanding_prompt_tokens = 0;
  error unavailable;                    // see load_report
  std::vector<double> ep_stage_seconds; // see load_report
  uint64_t ep_forwards = 0;
  cache_stats cache;
  std::map<std::string, uint64_t> unexpected_messages;                // see load_report
  std::map<std::string, uint64_t> rejected_messages;                  // see load_report
  uint64_t sequences_moved_in = 0, sequences_moved_out = 0;           // see load_report
  uint64_t mtp_drafted = 0, mtp_accepted = 0, mtp_drafting_steps = 0; // see load_report
  int64_t mtp_depth = 0;
  MSGPACK_DEFINE_MAP(name, role, alive, running, waiting, kv_blocks_used, kv_blocks_total,
                     outstanding_prompt_tokens, unavailable, ep_stage_seconds, ep_forwards, cache,
                     unexpected_messages, rejected_messages, sequences_moved_in,
                     sequences_moved_out, mtp_drafted, mtp_accepted, mtp_drafting_steps, mtp_depth);
};

struct cluster_stats {
  static constexpr uint16_t type_id = 113;
  static constexpr const char* type_name = "cluster_stats";
  static constexpr uint32_t max_bytes = 4u << 20;
  int64_t queued = 0; // admitted, not yet placed
  std::vector<instance_stats> instances;
  std::vector<std::pair<std::string, plane_traffic>> planes; // per instance
  std::string scheduler;                                     // who sent it
  std::map<std::string, uint64_t> scheduler_unexpected;      // its own, see load_report
  std::map<std::string, uint64_t> scheduler_rejected;        // its own, see load_report
  MSGPACK_DEFINE_MAP(queued, instances, planes, scheduler, scheduler_unexpected,
                     scheduler_rejected);
};

// ---- to a decode instance --------------------------------------------------------------------

struct decode_assign {
  static constexpr uint16_t type_id = 120;
  static constexpr const char* type_name = "decode_assign";
  static constexpr uint32_t max_bytes = 4u << 20;
  request_key key;
  request_spec spec;
  std::string prefill; // empty: prefill locally (colocated instance)
  int64_t kv_blocks = 0;
  // Set: `prefill` is the draining decode instance holding the sequence's KV, which sends it
  // (prompt and every generated token but the last) instead of a prefill.
  moved_kv moved;
  MSGPACK_DEFINE_MAP(key, spec, prefill, kv_blocks, moved);
};

// A run of whole KV blocks of one prompt in kv_block_pool's shipping layout; the first token
// rides along so the decode instance can start the request when the last run arrives. Runs
// may arrive in any order (big frames take the bulk path, small ones may overtake them).
struct kv_transfer {
  static constexpr uint16_t type_id = 121;
  static constexpr const char* type_name = "kv_transfer";
  static constexpr uint32_t max_bytes = (64u << 20) + 4096;
  request_key key;
  int32_t first_token = 0;
  int64_t prompt_tokens = 0;
  // Generated tokens whose KV follows the prompt's: 0 from a prefill; for a moving sequence,
  // all it generated but the last (which was sampled, never fed).
  int64_t generated_tokens = 0;
  int64_t block_floats = 0; // layout check: both sides must agree on the block shape
  int64_t first_block = 0;
  int64_t block_count = 0;
  int64_t total_blocks = 0;
  // With MTP ([decode] mtp), in the run of the first block: the main model's hidden states of
  // the positions whose MTP row is not computed yet (for a prompt, its last one) and the token
  // after each (model/mtp.hpp). Empty otherwise: the sequence decodes without drafts.
  int64_t mtp_first_position = -1;
  std::vector<int32_t> mtp_following;
  std::vector<float> mtp_hidden; // [rows][hidden_size]
  uint64_t checksum = 0;         // services/serving/kv_checksum.hpp: over the fields above and data
  transport::shared_bytes data;  // last: a spliced frame has no head part after it
  MSGPACK_DEFINE_MAP(key, first_token, prompt_tokens, generated_tokens, block_floats, first_block,
                     block_count, total_blocks, mtp_first_position, mtp_following, mtp_hidden,
                     checksum, data);
};

// To the draining decode instance a moved sequence's KV came from: it arrived whole, so the
// instance lets the blocks go.
struct moved_kv_received {
  static constexpr uint16_t type_id = 124;
  static constexpr const char* type_name = "moved_kv_received";
  static constexpr uint32_t max_bytes = 4096;
  request_key key; // moved_kv::key
  MSGPACK_DEFINE_MAP(key);
};

struct prefill_failed {
  static constexpr uint16_t type_id = 122;
  static constexpr const char* type_name = "prefill_failed";
  static constexpr uint32_t max_bytes = 4096;
  request_key key;
  error why;
  MSGPACK_DEFINE_MAP(key, why);
};

// The most sequences a decode instance runs in one batch, as the planner sets it from measured
// TPOT (docs/planner.md); 0: [decode] max_batch, which also bounds any cap. Sequences running
// above a lowered cap finish; new ones wait for a seat. From a gateway (the one running the
// planner), resent every planner round so a new or restarted instance has it too.
struct decode_batch_cap {
  static constexpr uint16_t type_id = 123;
  static constexpr const char* type_name = "decode_batch_cap";
  static constexpr uint32_t max_bytes = 64;
  int64_t cap = 0;
  MSGPACK_DEFINE_MAP(cap);
};

// ---- to a prefill instance -------------------------------------------------------------------

// To a prefill instance (the prompt's KV), or to a draining decode instance holding a moving
// sequence (`moved` set: that sequence's KV).
struct prefill_request {
  static constexpr uint16_t type_id = 130;
  static constexpr const char* type_name = "prefill_request";
  static constexpr uint32_t max_bytes = 4u << 20;
  request_key key;
  request_spec spec;
  moved_kv moved;
  MSGPACK_DEFINE_MAP(key, spec, moved);
};

// Registers every message above with the transport registry; idempotent.
void register_serving_messages();

} // namespace supernode::services::protocol
