#pragma once
// What the serving roles must reproduce, computed without them on the tiny model: the reference
// engine's generation for a request, and a prompt's KV as a prefill instance ships it (prefilled
// on a pool of its own, cut into kv_transfer runs of whole blocks).

#include "../model/tiny_model.hpp"
#include "model/engine.hpp"
#include "services/prefill/prefill_engine.hpp"
#include "services/protocol/serving_messages.hpp"
#include "services/serving/kv_checksum.hpp"

#include <algorithm>
#include <vector>

namespace supernode::testing {

inline model::generation_result reference_generation(const services::protocol::request_spec& s) {
  model::reference_engine engine(tiny_weights(model::precision::int8));
  model::generation_request r;
  r.prompt = s.prompt;
  r.max_tokens = s.max_tokens;
  r.sampling = {s.temperature, s.top_p, s.top_k, s.seed};
  r.stop_at_eos = s.stop_at_eos;
  return engine.generate(r);
}

struct prefilled_prompt {
  int32_t first_token = 0;
  std::vector<services::protocol::kv_transfer> runs; // in block order
};

inline prefilled_prompt prefill_prompt(const services::protocol::request_key& key,
                                       const services::protocol::request_spec& spec,
                                       int64_t block_size, int64_t blocks_per_run) {
  model::transformer m(tiny_weights(model::precision::int8));
  const auto layout = m.kv_layout(block_size, false);
  const auto prompt = static_cast<int64_t>(spec.prompt.size());
  model::kv_block_pool pool(layout, layout.blocks_for(prompt));
  model::kv_block_table table;
  table.reserve(pool, prompt);
  services::prefill_engine engine(m, 2048);
  services::prefill_job job;
  job.key = key;
  job.spec = spec;
  job.table = &table;
  std::vector<services::prefill_job*> jobs{&job};
  prefilled_prompt out;
  while (job.remaining() > 0)
    for (auto& done : engine.step(jobs, pool)) out.first_token = done.first_token;
  const auto total = static_cast<int64_t>(table.blocks().size());
  for (int64_t first = 0; first < total; first += blocks_per_run) {
    services::protocol::kv_transfer kv;
    kv.key = key;
    kv.first_token = out.first_token;
    kv.prompt_tokens = prompt;
    kv.block_floats = layout.block_floats();
    kv.first_block = first;
    kv.block_count = std::min(blocks_per_run, total - first);
    kv.total_blocks = total;
    std::vector<char> bytes(static_cast<size_t>(kv.block_count) * layout.block_bytes());
    for (int64_t i = 0; i < kv.block_count; ++i)
      pool.export_block_bytes(table.blocks()[first + i],
                              std::as_writable_bytes(std::span(bytes))
                                  .subspan(i * layout.block_bytes(), layout.block_bytes()));
    kv.data = transport::shared_bytes(std::move(bytes));
    kv.checksum = services::kv_transfer_checksum(kv);
    out.runs.push_back(std::move(kv));
  }
  return out;
}

} // namespace supernode::testing
