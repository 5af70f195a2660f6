#include "services/serving/serving_config.hpp"

#include "services/ems/model_blocks.hpp"
#include "services/ems/object_store.hpp"
#include "transport/cluster_config.hpp"

#include <sstream>
#include <stdexcept>
#include <toml++/toml.h>

namespace supernode::services {

namespace {

struct table_reader {
  const toml::table* table;
  std::string source, where;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw std::runtime_error(source + ": " + where + "." + key + " " + what);
  }
  template<class T>
  T get(const char* key, T fallback) const {
    if (!table) return fallback;
    const toml::node* n = table->get(key);
    if (!n) return fallback;
    if (auto v = n->value<T>()) return *v;
    fail(key, "has the wrong type");
  }
  int64_t get_int(const char* key, int64_t fallback, int64_t min, int64_t max) const {
    const int64_t v = get<int64_t>(key, fallback);
    if (v < min || v > max)
      fail(key, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                    std::to_string(v));
    return v;
  }
};

} // namespace

std::string serving_config::model_id() const {
  if (!model_name.empty()) return model_name;
  auto p = model_path.lexically_normal();
  if (p.has_filename()) return p.filename().string();
  return p.parent_path().filename().string();
}

std::string serving_config::cache_model_key() const {
  ems::object_store folder(model_path, 0.0);
  return ems::model_key(model_id(), ems::model_version(folder, "")) + "/" +
         model::precision_name(precision);
}

int64_t serving_config::prefill_pool_blocks() const {
  if (prefill_kv_blocks > 0) return prefill_kv_blocks;
  // A budget's worth of tokens, a partial block for each prompt in it, and room for the one
  // prompt longer than the budget that is chunked over several steps.
  return (prefill_token_budget + max_context) / block_size + 64;
}

serving_config serving_config::parse(std::string_view text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << source << ": " << e.description() << " at line " << e.source().begin.line;
    throw std::runtime_error(os.str());
  }
  auto reader = [&](const char* name) { return table_reader{root[name].as_table(), source, name}; };
  serving_config c;
  const auto model = reader("model");
  c.model_path = model.get<std::string>("path", c.model_path.string());
  try {
    c.precision = model::parse_precision(model.get<std::string>("precision", "int8"));
  } catch (const std::invalid_argument& e) {
    model.fail("precision", e.what());
  }
  c.max_context = model.get_int("max_context", c.max_context, 2, int64_t{1} << 20);
  c.block_size = reader("kv").get_int("block_size", c.block_size, 1, 4096);

  const auto gw = reader("gateway");
  c.http_host = gw.get<std::string>("host", c.http_host);
  c.http_port = static_cast<int>(gw.get_int("port", c.http_port, 0, 65535));
  c.max_body_bytes = static_cast<size_t>(
      gw.get_int("max_body_bytes", static_cast<int64_t>(c.max_body_bytes), 1024, 1 << 30));
  c.max_pending = gw.get_int("max_pending", c.max_pending, 1, 1 << 20);
  c.default_max_tokens =
      static_cast<int32_t>(gw.get_int("default_max_tokens", c.default_max_tokens, 1, 1 << 20));

  c.max_queued = reader("scheduler").get_int("max_queued", c.max_queued, 1, 1 << 20);

  const auto pf = reader("prefill");
  c.prefill_token_budget = pf.get_int("token_budget", c.prefill_token_budget, 1, 1 << 20);
  c.prefill_kv_blocks = pf.get_int("kv_blocks", c.prefill_kv_blocks, 0, 1 << 24);

  const auto dc = reader("decode");
  c.decode_max_batch = dc.get_int("max_batch", c.decode_max_batch, 1, 4096);
  c.decode_kv_blocks = dc.get_int("kv_blocks", c.decode_kv_blocks, 1, 1 << 24);

  const auto ep = reader("ep");
  c.decode_ranks = static_cast<int32_t>(ep.get_int("decode_ranks", c.decode_ranks, 1, 1024));
  c.prefill_ranks = static_cast<int32_t>(ep.get_int("prefill_ranks", c.prefill_ranks, 1, 1024));
  c.microbatch = ep.get<bool>("microbatch", c.microbatch);
  c.redundant_experts =
      static_cast<int32_t>(ep.get_int("redundant_experts", c.redundant_experts, 0, 64));
  c.eplb_interval = ep.get_int("eplb_interval", c.eplb_interval, 0, 1 << 20);
  if (c.eplb_interval > 0 && c.eplb_interval < 4) ep.fail("eplb_interval", "must be 0 or >= 4");
  c.ep_op_timeout_ms = ep.get_int("op_timeout_ms", c.ep_op_timeout_ms, 100, 3600000);

  const auto em = reader("ems");
  auto& e = c.ems;
  constexpr int64_t tib = int64_t{1} << 40;
  e.dram_bytes = static_cast<uint64_t>(
      em.get_int("dram_bytes", static_cast<int64_t>(e.dram_bytes), 4096, tib));
  e.dram_high_watermark = em.get<double>("dram_high_watermark", e.dram_high_watermark);
  if (!(e.dram_high_watermark > 0.0 && e.dram_high_watermark <= 1.0))
    em.fail("dram_high_watermark", "must be in (0, 1]");
  e.ssd_bytes =
      static_cast<uint64_t>(em.get_int("ssd_bytes", static_cast<int64_t>(e.ssd_bytes), 4096, tib));
  e.data_dir = em.get<std::string>("data_dir", "");
  e.huge_pages = em.get<bool>("huge_pages", e.huge_pages);
  const auto path = em.get<std::string>("read_path", "ub");
  if (path != "ub" && path != "vpc") em.fail("read_path", "must be \"ub\" or \"vpc\"");
  e.read_over_ub = path == "ub";
  e.vnodes = static_cast<int32_t>(em.get_int("vnodes", e.vnodes, 1, 4096));
  e.timeout_ms = em.get_int("timeout_ms", e.timeout_ms, 10, 3600000);
  e.context_cache = em.get<bool>("context_cache", e.context_cache);
  e.block_tokens = em.get_int("block_tokens", e.block_tokens, 1, 65536);
  if (e.block_tokens % c.block_size != 0)
    em.fail("block_tokens", "must be a multiple of [kv] block_size (" +
                                std::to_string(c.block_size) + "), got " +
                                std::to_string(e.block_tokens));
  e.context_namespace = em.get<std::string>("context_namespace", e.context_namespace);
  e.store_decode_kv = em.get<bool>("store_decode_kv", e.store_decode_kv);
  e.model_cache = em.get<bool>("model_cache", e.model_cache);
  e.object_store = em.get<std::string>("object_store", "");
  e.object_store_bandwidth = em.get<double>("object_store_bandwidth", e.object_store_bandwidth);
  if (!(e.object_store_bandwidth >= 0.0)) em.fail("object_store_bandwidth", "must be >= 0");
  e.model_namespace = em.get<std::string>("model_namespace", e.model_namespace);
  e.model_block_bytes = static_cast<uint64_t>(em.get_int(
      "model_block_bytes", static_cast<int64_t>(e.model_block_bytes), 4096, int64_t{1} << 30));
  if (e.model_cache && e.object_store.empty())
    em.fail("object_store", "must name a folder when model_cache = true");
  if (const auto* quotas = root["ems"]["quotas"].as_table()) {
    const table_reader q{quotas, source, "ems.quotas"};
    for (auto& [ns, value] : *quotas) {
      const std::string name(ns.str());
      e.quotas.emplace_back(name, static_cast<uint64_t>(q.get_int(name.c_str(), 0, 0, tib * 1024)));
    }
  }
  return c;
}

serving_config serving_config::load(const std::filesystem::path& file) {
  return parse(transport::read_config_file(file), file.string());
}

} // namespace supernode::services
