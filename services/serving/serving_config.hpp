#pragma once
// What a serving cluster serves and how each role sizes itself: the [model], [kv], [gateway],
// [scheduler], [prefill], [decode], [ep], [ems] and [planner] tables of the same TOML file that
// describes the cluster (transport::cluster_config reads the topology; this reads the rest;
// cluster_file parses the file once for both). Every process of a cluster reads the same file, so
// prefill and decode agree on the KV block shape. Every key, with its type, default and range:
// docs/configuration.md.
//
//   [model]     path = "models/demo"   precision = "int8"   max_context = 4096
//   [kv]        block_size = 16
//   [gateway]   host = "127.0.0.1"  port = 8000  max_body_bytes = 1048576  max_pending = 1024
//               api_keys_file = ""  allow_unauthenticated = false  default_max_tokens = 4096
//               header_timeout_ms = 10000  idle_timeout_ms = 60000  max_connections_per_client = 64
//               recovery_timeout_ms = 30000  stall_timeout_ms = 15000
//   [scheduler] max_queued = 1024
//   [prefill]   token_budget = 2048   kv_blocks = 0     # 0: enough for one budget of prompts
//   [decode]    max_batch = 64   kv_blocks = 2048   drain = "migrate"   # or "finish"
//               mtp = 0   mtp_adaptive = true   mtp_sampling = "reproducible"  # or "standard"
//               mtp_draft_vocab = 0   mtp_draft_vocab_file = ""
//   [ep]        decode_ranks = 1  prefill_ranks = 1  microbatch = false
//               redundant_experts = 0  eplb_interval = 0  op_timeout_ms = 30000
//   [ems]       the memory pool and its caches: services/ems/ems_config.hpp
//   [planner]   the SLO planner, off by default: services/planner/planner_config.hpp

#include "model/decode_step.hpp"
#include "model/linear.hpp"
#include "services/ems/ems_config.hpp"
#include "services/planner/planner_config.hpp"
#include "services/serving/drain_mode.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace supernode::model {
struct model_config; // model/config.hpp
} // namespace supernode::model

namespace supernode::transport {
class config_document;   // config_document.hpp
struct cluster_config;   // cluster_config.hpp
struct config_table_doc; // config_schema.hpp
} // namespace supernode::transport

namespace supernode::services {

struct serving_config {
  std::filesystem::path model_path = "models/demo";
  model::precision precision = model::precision::int8;
  int64_t max_context = 4096; // capped by the model's max_position_embeddings
  int64_t block_size = 16;

  std::string http_host = "127.0.0.1";
  int http_port = 8000; // 0: any free port (tests)
  size_t max_body_bytes = size_t{1} << 20;
  int64_t max_pending = 1024;          // requests in flight at a gateway; beyond: 429
  int32_t default_max_tokens = 4096;   // requests without max_tokens, capped by the context left
  std::filesystem::path api_keys_file; // empty: no keys, the API is open (loopback only)
  bool allow_unauthenticated = false;  // open API on any host (`serve --allow-unauthenticated`)
  int64_t header_timeout_ms = 10000;   // a request header must arrive within; beyond: 408
  int64_t idle_timeout_ms = 60000;     // an idle keep-alive connection is closed after
  int64_t max_connections_per_client = 64; // per client address; beyond: 429 and closed
  // How long a request whose instance died, hung or failed retryably is placed again (it
  // resumes where its stream stopped) before its client gets the error; 0: never resumed.
  int64_t recovery_timeout_ms = 30000;
  // A request mid-stream that hears nothing from its decode instance this long is placed again.
  int64_t stall_timeout_ms = 15000;
  int64_t first_token_timeout_ms = 60000;
  std::string admin_token_file; // POST /admin/scale's bearer tokens; empty: the admin API is off

  int64_t max_queued = 1024; // admitted but not yet placed, at the scheduler; beyond: 429

  int64_t prefill_token_budget = 2048; // prompt tokens packed into one prefill step
  int64_t prefill_kv_blocks = 0;

  int64_t decode_max_batch = 64;
  int64_t decode_kv_blocks = 2048;
  // How a decode instance that is scaled down (SIGTERM) hands over its running sequences.
  drain_mode decode_drain = drain_mode::migrate;
  // Speculative decoding with the model's MTP module: drafts per step (0: off) and whether a
  // decode instance adapts the depth to what verification costs (services/decode/mtp_depth.hpp).
  int64_t decode_mtp_drafts = 0;
  bool decode_mtp_adaptive = true;
  model::draft_acceptance decode_mtp_sampling = model::draft_acceptance::reproducible;
  // Drafts propose only this many tokens (0: any), ranked by the file or by id.
  int64_t decode_mtp_draft_vocab = 0;
  std::string decode_mtp_draft_vocab_file;
  // The KV blocks of every pool of the cluster carry the MTP layer (prefill writes it).
  bool kv_with_mtp() const { return decode_mtp_drafts > 0; }

  // Expert parallelism: consecutive decode (prefill) instances form one instance of this many
  // ranks; expert_shard instances join the decode groups (attention/MoE split).
  int32_t decode_ranks = 1;
  int32_t prefill_ranks = 1;
  bool microbatch = false;          // two microbatches per step, attention overlapping MoE
  int32_t redundant_experts = 0;    // replica slots per expert host that EPLB may fill
  int64_t eplb_interval = 0;        // forwards between EPLB re-placements; 0: off
  int64_t ep_op_timeout_ms = 30000; // a peer silent this long breaks the group

  ems::ems_config ems;
  planner::planner_config planner;

  // The model id served: model_name when set (a model loaded from a local copy of the pool's),
  // else the model folder's name.
  std::string model_id() const;
  std::string model_name;
  // What context-cache keys are made of: the model id, its version (a fingerprint of the model
  // folder) and the precision, so KV of another model, version or precision never matches.
  std::string cache_model_key() const;
  // prefill_kv_blocks, or enough for a full budget plus one partly filled block per prompt.
  int64_t prefill_pool_blocks() const;

  // The allocations these values size, checked against the model before a role loads weights
  // or allocates a pool: each KV pool ([decode] kv_blocks; [prefill] kv_blocks, or what
  // token_budget and max_context make of 0) and a full decode batch's logits ([decode]
  // max_batch) must fit in `memory_bytes`. Throws std::runtime_error naming the key, its value
  // and the bytes it asks for, instead of a bad_alloc (or the OOM killer) later.
  void check_sizes(const model::model_config& model, uint64_t memory_bytes) const;
  // The same for model_path's config.json and this machine's physical memory.
  void check_sizes_against_model() const;

  // Reads the serving tables of a parsed file. Strict (transport/config_document.hpp): throws
  // std::runtime_error naming the file, line, table and key of an unknown key, a wrong type or a
  // value out of range. The topology tables are cluster_config's.
  static serving_config from(const transport::config_document& file);
  // With [planner] enabled, the topology it plans over: each of prefill and decode hosted by one
  // process kind, one instance per process, within the kind's slots, and no expert-parallel
  // groups ([ep] ranks 1: a count of processes is then a count of instances). Throws
  // std::runtime_error naming the file, line, table and key to change. cluster_file calls it.
  void check_planner_topology(const transport::config_document& file,
                              const transport::cluster_config& cluster) const;
  // The serving tables and their keys, as docs/configuration.md lists them.
  static std::vector<transport::config_table_doc> tables();
};

} // namespace supernode::services
