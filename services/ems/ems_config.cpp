#include "services/ems/ems_config.hpp"

#include "transport/config_schema.hpp"

namespace supernode::services::ems {

const transport::config_table<ems_config>& ems_config_table() {
  constexpr int64_t tib = int64_t{1} << 40;
  static const auto table =
      transport::config_table<ems_config>(
          "ems", "The EMS memory pool (MP servers and the clients in other roles) and the two "
                 "caches built on it: prefill's context cache and the model cache.")
          .integer("dram_bytes", &ems_config::dram_bytes, 4096, tib,
                   "each MP server's DRAM tier, shared with the clients of its host")
          .floating("dram_high_watermark", &ems_config::dram_high_watermark, 0.0, 1.0,
                    "fraction of the DRAM tier a put may fill before LRU blocks move to SSD")
          .excluding_low()
          .integer("ssd_bytes", &ems_config::ssd_bytes, 4096, tib,
                   "each MP server's SSD tier (files in data_dir); beyond it LRU blocks leave")
          .string("data_dir", &ems_config::data_dir, "the MP server's SSD tier folder")
          .documented_default("`<run_dir>/ems/<instance>`")
          .boolean("huge_pages", &ems_config::huge_pages,
                   "map the DRAM tier with huge pages when the system has them")
          .enumerated("read_path", &ems_config::read_over_ub, {{"ub", true}, {"vpc", false}},
                      "ub: clients copy blocks out of the server's mapped DRAM; vpc: the bytes "
                      "come in the reply")
          .integer("vnodes", &ems_config::vnodes, 1, 4096,
                   "points of each MP server on the consistent-hash ring")
          .integer("replicas", &ems_config::replicas, 1, 2,
                   "copies of every block, on the first distinct servers of its key on the ring "
                   "(quotas count every copy)")
          .integer("timeout_ms", &ems_config::timeout_ms, 10, 3600000,
                   "how long a client waits for the pool before a get is a miss and a put fails")
          .integer("handover_timeout_ms", &ems_config::handover_timeout_ms, 0, 3600000,
                   "how long a ring change (an MP server joining or leaving) waits for the "
                   "servers to hand over the blocks it moves (a round whose blocks did not "
                   "reach their new owner is planned again until then); past it the new ring is "
                   "published anyway and the blocks not handed over are lost to the cache")
          .boolean("context_cache", &ems_config::context_cache,
                   "prefill looks up cached prompt prefixes in the pool and stores new KV blocks")
          .integer("block_tokens", &ems_config::block_tokens, 1, 65536,
                   "tokens per context-cache block")
          .rule("a multiple of [kv] block_size")
          .string("context_namespace", &ems_config::context_namespace,
                  "the pool namespace of context-cache blocks")
          .enumerated("store_decode_kv", &ems_config::store_decode_kv,
                      {{"off", decode_kv_store::off},
                       {"on_finish", decode_kv_store::on_finish},
                       {"incremental", decode_kv_store::incremental}},
                      "decode stores its generated tokens' KV (never served as a prompt prefix): "
                      "when a sequence ends, or each block once full, for resuming elsewhere; "
                      "true/false read as on_finish/off")
          .booleans_as("off", "on_finish")
          .boolean("model_cache", &ems_config::model_cache,
                   "bring [model] path from object_store into a local copy through the pool: read "
                   "from the bucket once for all instances starting together")
          .string("object_store", &ems_config::object_store,
                  "the folder holding model folders (the object-storage bucket)")
          .rule("required when model_cache = true")
          .floating("object_store_bandwidth", &ems_config::object_store_bandwidth, 0.0,
                    std::numeric_limits<double>::infinity(),
                    "bytes per second the bucket serves to all its readers together; 0: no cap")
          .string("model_namespace", &ems_config::model_namespace,
                  "the pool namespace of model blocks")
          .integer("model_block_bytes", &ems_config::model_block_bytes, 4096, int64_t{1} << 30,
                   "bytes per model block")
          .subtable("quotas");
  return table;
}

} // namespace supernode::services::ems
