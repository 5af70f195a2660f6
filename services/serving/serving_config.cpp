#include "services/serving/serving_config.hpp"

#include "model/config.hpp"
#include "model/kv_cache.hpp"
#include "services/ems/model_blocks.hpp"
#include "services/ems/object_store.hpp"
#include "services/planner/planner_sampler.hpp"
#include "transport/config_schema.hpp"

#include <cstdio>
#include <stdexcept>
#include <unistd.h>

namespace supernode::services {

namespace {

using transport::config_key, transport::config_table, transport::config_type,
    transport::config_value;
using table = config_table<serving_config>;

const std::vector<table>& serving_tables() {
  static const std::vector<table> tables = [] {
    using enum model::precision;
    std::vector<table> t;
    t.push_back(
        table("model", "The model every prefill and decode instance serves.")
            .string("path", &serving_config::model_path,
                    "the model folder (config.json, safetensors); `--model` overrides; "
                    "models/demo is made from the demo preset (the trained model) on first use")
            .enumerated("precision", &serving_config::precision,
                        {{model::precision_name(int8), int8}, {model::precision_name(fp32), fp32}},
                        "int8: INT8 weights and activations; fp32: the float reference")
            .integer("max_context", &serving_config::max_context, 2, int64_t{1} << 20,
                     "tokens of prompt and completion per request, capped by the model's "
                     "max_position_embeddings"));
    t.push_back(
        table("kv", "The paged latent KV cache, shared by prefill and decode.")
            .integer("block_size", &serving_config::block_size, 1, 4096, "tokens per KV block"));
    t.push_back(
        table("gateway", "The OpenAI-compatible HTTP front end.")
            .string("host", &serving_config::http_host, "the address it listens on")
            .integer("port", &serving_config::http_port, 0, 65535,
                     "the port it listens on (gateway N of the cluster: port + N); 0: any free "
                     "port (printed at start)")
            .integer("max_body_bytes", &serving_config::max_body_bytes, 1024, int64_t{1} << 30,
                     "largest request body; beyond: 413")
            .integer("max_pending", &serving_config::max_pending, 1, int64_t{1} << 20,
                     "requests in flight at a gateway; beyond: 429")
            .integer("default_max_tokens", &serving_config::default_max_tokens, 1, int64_t{1} << 20,
                     "completion tokens of a request without max_tokens (chat and "
                     "completions), never more than the context leaves")
            .string("api_keys_file", &serving_config::api_keys_file,
                    "API keys, one a line: `<key> [name=<label>] [max_concurrent=<n>] "
                    "[tokens_per_minute=<n>]`; /v1/* then needs `Authorization: Bearer "
                    "<key>`; the file must have no group or other permissions; empty: no "
                    "keys, and the gateway listens on loopback only")
            .string("admin_token_file", &serving_config::admin_token_file,
                    "tokens for POST /admin/scale, one a line like api_keys_file (0600); "
                    "empty: the admin API answers 403")
            .boolean("allow_unauthenticated", &serving_config::allow_unauthenticated,
                     "without api_keys_file, listen on a non-loopback host anyway "
                     "(`supernode serve --allow-unauthenticated` does the same)")
            .integer("header_timeout_ms", &serving_config::header_timeout_ms, 100, 3600000,
                     "a request header must be complete within; beyond: 408")
            .integer("idle_timeout_ms", &serving_config::idle_timeout_ms, 100, 86400000,
                     "an idle keep-alive connection is closed after")
            .integer("max_connections_per_client", &serving_config::max_connections_per_client, 1,
                     1 << 20, "open connections per client address; beyond: 429 and closed")
            .integer("recovery_timeout_ms", &serving_config::recovery_timeout_ms, 0, 3600000,
                     "a request whose instance died, hung or failed retryably is placed again, "
                     "resuming where its stream stopped, for this long before its client gets "
                     "the error; 0: never resumed")
            .integer("stall_timeout_ms", &serving_config::stall_timeout_ms, 100, 3600000,
                     "a request mid-stream that hears nothing from its decode instance for this "
                     "long (its tokens lost on the way, the instance stuck) is placed again")
            .integer("first_token_timeout_ms", &serving_config::first_token_timeout_ms, 100,
                     3600000,
                     "a request without its first token this long after its admission or "
                     "placement (a frame of it lost on the way) is placed again, a resumed one "
                     "too; longer than "
                     "stall_timeout_ms, as a prompt may queue"));
    t.push_back(table("scheduler", "Admission and placement of requests.")
                    .integer("max_queued", &serving_config::max_queued, 1, int64_t{1} << 20,
                             "requests admitted but not yet placed; beyond: 429"));
    t.push_back(
        table("prefill", "Each prefill instance.")
            .integer("token_budget", &serving_config::prefill_token_budget, 1, int64_t{1} << 20,
                     "prompt tokens packed into one prefill step")
            .integer("kv_blocks", &serving_config::prefill_kv_blocks, 0, int64_t{1} << 24,
                     "KV blocks of its pool; 0: one budget of prompts plus one longest prompt"));
    t.push_back(table("decode", "Each decode instance.")
                    .integer("max_batch", &serving_config::decode_max_batch, 1, 4096,
                             "sequences decoded together in one step")
                    .integer("kv_blocks", &serving_config::decode_kv_blocks, 1, int64_t{1} << 24,
                             "KV blocks of its pool (times [kv] block_size tokens)")
                    .enumerated("drain", &serving_config::decode_drain,
                                {{"migrate", drain_mode::migrate}, {"finish", drain_mode::finish}},
                                "when scaled down (SIGTERM): move running sequences with their "
                                "KV to another decode instance, or let them finish first")
                    .integer("mtp", &serving_config::decode_mtp_drafts, 0, 8,
                             "tokens the MTP module drafts per step for the main model to verify "
                             "(speculative decoding; 0: off); the KV blocks then carry the MTP "
                             "layer, so every role of the cluster must read the same value")
                    .boolean("mtp_adaptive", &serving_config::decode_mtp_adaptive,
                             "draft fewer tokens, or none, at batches where measured step "
                             "times and acceptance say verifying costs more than it yields "
                             "(docs/speculative-decoding.md)")
                    .enumerated("mtp_sampling", &serving_config::decode_mtp_sampling,
                                {{"reproducible", model::draft_acceptance::reproducible},
                                 {"standard", model::draft_acceptance::standard}},
                                "how sampled requests accept drafts: reproducible (a draft is "
                                "accepted when it is the token sampling draws there, so seeded "
                                "requests give the same tokens with drafts or without, at any "
                                "batch and after a resume) or standard (min(1, p/q): more "
                                "accepted, the same distribution, other draws)")
                    .integer("mtp_draft_vocab", &serving_config::decode_mtp_draft_vocab, 0,
                             int64_t{1} << 24,
                             "drafts propose only this many tokens, through a head of their "
                             "rows (0: the whole vocabulary); outputs never change, a draft "
                             "costs a fraction of the head (docs/speculative-decoding.md)")
                    .string("mtp_draft_vocab_file", &serving_config::decode_mtp_draft_vocab_file,
                            "token ids ranked most frequent first (whitespace-separated) that "
                            "mtp_draft_vocab takes its tokens from; empty: the lowest ids, "
                            "which byte-level BPE gives its most frequent tokens"));
    t.push_back(
        table("ep", "Expert parallelism: consecutive decode (prefill) instances form one "
                    "instance of this many ranks; expert_shard instances join the decode groups "
                    "(the attention/MoE split).")
            .integer("decode_ranks", &serving_config::decode_ranks, 1, 1024,
                     "ranks of each decode instance")
            .integer("prefill_ranks", &serving_config::prefill_ranks, 1, 1024,
                     "ranks of each prefill instance")
            .boolean("microbatch", &serving_config::microbatch,
                     "two microbatches per step, attention of one overlapping MoE of the other")
            .integer("redundant_experts", &serving_config::redundant_experts, 0, 64,
                     "replica slots per expert host that EPLB may fill")
            .integer("eplb_interval", &serving_config::eplb_interval, 0, int64_t{1} << 20,
                     "forwards between EPLB re-placements; 0: off")
            .rule("0 or >= 4")
            .integer("op_timeout_ms", &serving_config::ep_op_timeout_ms, 100, 3600000,
                     "a peer silent this long breaks the group"));
    return t;
  }();
  return tables;
}

// [planner]: the SLO planner's targets and bounds (services/planner/planner.hpp).
const config_table<planner::planner_config>& planner_table() {
  using planner::planner_config;
  static const auto table =
      config_table<planner_config>(
          "planner", "The SLO planner: prefill and decode counts, P<->D switches and the decode "
                     "batch cap from measured latencies (docs/planner.md).")
          .boolean("enabled", &planner_config::enabled,
                   "run the planner (in gateway-0); off: the counts stay as `cluster up` or "
                   "`cluster scale` set them")
          .integer("ttft_ms", &planner_config::ttft_ms, 1, 3600000,
                   "target p90 time to first token; over it: one more prefill instance")
          .integer("tpot_ms", &planner_config::tpot_ms, 1, 600000,
                   "target p90 time per output token; over it: a lower batch cap or one more "
                   "decode instance")
          .integer("interval_ms", &planner_config::interval, 100, 3600000,
                   "at most one decision per interval")
          .integer("min_prefill", &planner_config::min_prefill, 1, 1024, "fewest prefill instances")
          .integer("max_prefill", &planner_config::max_prefill, 1, 1024, "most prefill instances")
          .rule(">= min_prefill; enabled: <= count of the prefill [process]")
          .integer("min_decode", &planner_config::min_decode, 1, 1024, "fewest decode instances")
          .integer("max_decode", &planner_config::max_decode, 1, 1024, "most decode instances")
          .rule(">= min_decode; enabled: <= count of the decode [process]")
          .integer("max_total", &planner_config::max_total, 0, 2048,
                   "most prefill and decode instances together; at it, a role over target takes "
                   "an instance from the other (a P<->D switch); 0: max_prefill + max_decode")
          .rule("0 or >= min_prefill + min_decode")
          .integer("cooldown_ms", &planner_config::cooldown, 0, 3600000,
                   "no count change within this long after the last one finished")
          .integer("scale_down_after_ms", &planner_config::scale_down_after, 0, 3600000,
                   "a role is scaled down only after being idle at every evaluation this long; "
                   "0: at the first")
          .floating("scale_down_below", &planner_config::scale_down_below, 0.05, 0.95,
                    "a role is scaled down (or gives an instance to the other) only with its "
                    "p90 under this fraction of its target, and idle")
          .floating("kv_high", &planner_config::kv_high, 0.0, 1.0,
                    "decode KV usage over which one more decode instance starts")
          .excluding_low()
          .floating("kv_low", &planner_config::kv_low, 0.0, 1.0,
                    "decode KV usage, as the others would see it after a drain, under which a "
                    "decode instance may go")
          .rule("< kv_high")
          .boolean("batch_cap", &planner_config::batch_cap,
                   "also set the decode batch cap: the largest batch whose TPOT, on a line "
                   "fitted to measured (batch, TPOT p90), meets tpot_ms");
  return table;
}

// The [planner] rules across keys, each naming the key that breaks it.
void check_planner(const transport::config_document& file, const planner::planner_config& p) {
  auto at_least = [&](const char* key, int32_t value, const char* bound_key, int32_t bound) {
    if (value < bound)
      file.fail({"planner"}, key,
                std::string("must be >= ") + bound_key + " (" + std::to_string(bound) + "), got " +
                    std::to_string(value));
  };
  at_least("max_prefill", p.max_prefill, "min_prefill", p.min_prefill);
  at_least("max_decode", p.max_decode, "min_decode", p.min_decode);
  if (p.max_total != 0 && p.max_total < p.min_prefill + p.min_decode)
    file.fail({"planner"}, "max_total",
              "must be 0 or >= min_prefill + min_decode (" +
                  std::to_string(p.min_prefill + p.min_decode) + "), got " +
                  std::to_string(p.max_total));
  if (p.kv_low >= p.kv_high) {
    char text[96];
    std::snprintf(text, sizeof text, "must be < kv_high (%g), got %g", p.kv_high, p.kv_low);
    file.fail({"planner"}, "kv_low", text);
  }
}

// [ems.quotas]: a namespace's bytes over the whole pool, for any namespace.
const config_key& quota_key() {
  static const config_key key = [] {
    config_key k("<namespace>", config_type::integer,
                 "bytes the namespace may hold over the whole pool; unlisted: no quota");
    k.min = 0;
    k.max = int64_t{1} << 50;
    k.default_text = "none";
    return k;
  }();
  return key;
}

} // namespace

std::string serving_config::model_id() const {
  if (!model_name.empty()) return model_name;
  auto p = model_path.lexically_normal();
  if (p.has_filename()) return p.filename().string();
  return p.parent_path().filename().string();
}

std::string serving_config::cache_model_key() const {
  ems::object_store folder(model_path, 0.0);
  // Blocks with the MTP layer are another shape: never mixed with blocks without it.
  return ems::model_key(model_id(), ems::model_version(folder, "")) + "/" +
         model::precision_name(precision) + (kv_with_mtp() ? "/mtp" : "");
}

int64_t serving_config::prefill_pool_blocks() const {
  if (prefill_kv_blocks > 0) return prefill_kv_blocks;
  // A budget's worth of tokens, a partial block for each prompt in it, and room for the one
  // prompt longer than the budget that is chunked over several steps.
  return (prefill_token_budget + max_context) / block_size + 64;
}

namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / double(uint64_t{1} << 30));
  return text;
}

void require_fits(const std::string& key, int64_t value, double bytes, const std::string& what,
                  uint64_t memory_bytes) {
  if (bytes <= static_cast<double>(memory_bytes)) return;
  throw std::runtime_error(key + " = " + std::to_string(value) + " asks for " + gib(bytes) + " (" +
                           what + "), more than the " + gib(static_cast<double>(memory_bytes)) +
                           " of memory here");
}

} // namespace

void serving_config::check_sizes(const model::model_config& model, uint64_t memory_bytes) const {
  // The pool layout of prefill_instance and decode_instance: the main model's layers only.
  const model::kv_block_layout kv{model.num_hidden_layers, block_size, model.kv_lora_rank,
                                  model.qk_rope_head_dim};
  const double block_bytes = static_cast<double>(kv.block_bytes());
  const std::string per_block = std::to_string(kv.block_bytes()) +
                                " bytes per block: " + std::to_string(kv.layers) + " layers x " +
                                std::to_string(block_size) + " tokens x " +
                                std::to_string(kv.token_floats()) + " floats";
  require_fits("[decode] kv_blocks", decode_kv_blocks, decode_kv_blocks * block_bytes,
               "KV pool, " + per_block, memory_bytes);
  const int64_t prefill_blocks = prefill_pool_blocks();
  require_fits(prefill_kv_blocks > 0 ? "[prefill] kv_blocks"
                                     : "[prefill] kv_blocks (0: from token_budget and "
                                       "[model] max_context)",
               prefill_blocks, prefill_blocks * block_bytes, "KV pool, " + per_block, memory_bytes);
  require_fits("[decode] max_batch", decode_max_batch,
               static_cast<double>(decode_max_batch) * static_cast<double>(model.vocab_size) * 4,
               "one step's logits, vocab_size " + std::to_string(model.vocab_size) + " floats each",
               memory_bytes);
}

void serving_config::check_sizes_against_model() const {
  const auto pages = ::sysconf(_SC_PHYS_PAGES), page_bytes = ::sysconf(_SC_PAGESIZE);
  check_sizes(model::model_config::load(model_path / "config.json"),
              static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes));
}

serving_config serving_config::from(const transport::config_document& file) {
  serving_config c;
  for (auto& t : serving_tables()) t.read(file, c);
  if (c.eplb_interval > 0 && c.eplb_interval < 4)
    file.fail({"ep"}, "eplb_interval", "must be 0 or >= 4, got " + std::to_string(c.eplb_interval));

  auto& e = c.ems;
  ems::ems_config_table().read(file, e);
  if (e.block_tokens % c.block_size != 0)
    file.fail({"ems"}, "block_tokens",
              "must be a multiple of [kv] block_size (" + std::to_string(c.block_size) + "), got " +
                  std::to_string(e.block_tokens));
  if (e.model_cache && e.object_store.empty())
    file.fail({"ems"}, "object_store", "must name a folder when model_cache = true");
  file.read_entries({"ems", "quotas"}, quota_key(), [&](const std::string& ns, config_value v) {
    e.quotas.emplace_back(ns, static_cast<uint64_t>(std::get<int64_t>(v)));
  });

  planner_table().read(file, c.planner);
  check_planner(file, c.planner);
  return c;
}

void serving_config::check_planner_topology(const transport::config_document& file,
                                            const transport::cluster_config& cluster) const {
  if (!planner.enabled) return;
  for (auto [key, ranks] :
       {std::pair{"decode_ranks", decode_ranks}, {"prefill_ranks", prefill_ranks}})
    if (ranks != 1)
      file.fail({"ep"}, key,
                "must be 1 with the planner on ([planner] enabled = true): it scales one "
                "process per instance, got " +
                    std::to_string(ranks));
  const auto kinds = planner::planner_process_kinds(cluster, planner);
  if (kinds.problem) file.fail(kinds.problem->table, kinds.problem->key, kinds.problem->what);
}

std::vector<transport::config_table_doc> serving_config::tables() {
  std::vector<transport::config_table_doc> docs;
  for (auto& t : serving_tables()) docs.push_back(t.document());
  docs.push_back(ems::ems_config_table().document());
  docs.push_back({"ems.quotas",
                  "Quotas of pool namespaces (context, models, ...).",
                  {transport::document_key(quota_key(), "")}});
  docs.push_back(planner_table().document());
  return docs;
}

} // namespace supernode::services
