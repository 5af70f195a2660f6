#include "apps/bench/resume_bench.hpp"

#include "apps/bench/kernel_bench_common.hpp"
#include "apps/cli_args.hpp"
#include "kernels/thread_pool.hpp"
#include "model/transformer.hpp"
#include "services/decode/decode_batch.hpp"
#include "services/decode/decode_kv_mirror.hpp"
#include "services/ems/context_cache_memory_pool.hpp"
#include "services/prefill/prefill_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

namespace supernode::apps {

namespace {

namespace ems = services::ems;
namespace protocol = services::protocol;
using services::decode_sequence;

constexpr int64_t block_size = 16;

struct resume_timing {
  double seconds = 0;
  int64_t loaded_blocks = 0;
  int32_t next_token = -1;
};

// One decode instance's share of a resume: a KV pool, the batch, a prefill engine standing in
// for the prefill instance, and the context cache over an in-memory pool.
struct resume_rig {
  model::transformer& model;
  model::kv_block_pool pool;
  services::decode_batch batch;
  services::prefill_engine prefill;
  ems::context_cache_client& cache;
  bool mirroring = false; // blocks go to the pool as steps fill them (incremental)

  resume_rig(model::transformer& m, int64_t tokens, ems::context_cache_client& c)
      : model(m),
        pool(m.kv_layout(block_size, false), m.kv_layout(block_size, false).blocks_for(tokens)),
        batch(m, pool, [this](decode_sequence& s) { s.table.release(pool); }), prefill(m, 4096),
        cache(c) {
    batch.set_after_forward([this](decode_sequence& s) {
      if (mirroring) services::mirror_full_blocks(s, cache, pool);
    });
  }

  // The sequence with its prompt's KV in its table, as it is when the KV arrived.
  std::pair<std::unique_ptr<decode_sequence>, int32_t>
  prefilled(const protocol::request_spec& spec) {
    auto seq = std::make_unique<decode_sequence>();
    seq->key = {"gateway-0", 1};
    seq->spec = spec;
    seq->table.reserve(pool, static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens);
    services::prefill_job job;
    job.key = seq->key;
    job.spec = spec;
    job.table = &seq->table;
    std::vector<services::prefill_job*> jobs{&job};
    int32_t first = -1;
    while (job.remaining() > 0)
      for (auto& done : prefill.step(jobs, pool)) first = done.first_token;
    return {std::move(seq), first};
  }

  // From the prompt's KV in the table to the first new token; the sequence then leaves.
  resume_timing resume(const protocol::request_spec& spec, bool load) {
    auto [seq, first] = prefilled(spec);
    resume_timing t;
    const auto start = std::chrono::steady_clock::now();
    if (load) t.loaded_blocks = services::load_mirrored_kv(*seq, cache, pool);
    auto joined = batch.join(std::move(seq), first);
    if (!joined.failure.ok()) throw std::runtime_error("resume failed: " + joined.failure.message);
    const auto updates = batch.step();
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (updates.size() != 1 || updates[0].tokens.size() != 1)
      throw std::logic_error("a resume step gave no token");
    t.next_token = updates[0].tokens[0];
    batch.fail_all({protocol::serving_errc::cancelled, "measured"});
    return t;
  }
};

using kernel_bench::median;

} // namespace

int run_resume_bench(cli_args& args) {
  const std::string dir = args.take_or("--model", "build/release/test-models/tiny");
  const auto lengths = parse_id_list(args.take_or("--lengths", "64,256,1024"), "--lengths");
  if (lengths.empty() || *std::min_element(lengths.begin(), lengths.end()) < 2)
    throw usage_error("--lengths: generated lengths of at least 2");
  const int64_t prompt_tokens = args.take_int("--prompt", 64, 1, 65536);
  const int64_t repeats = args.take_int("--repeats", 3, 1, 100);
  if (auto threads = args.take_int("--threads", 0, 0, 1024); threads > 0)
    kernels::thread_pool::configure_shared(static_cast<int>(threads));
  args.expect_consumed("bench resume");

  model::load_options lo;
  lo.prec = model::precision::int8;
  lo.load_mtp = false;
  model::transformer m(model::model_weights::load(dir, lo));
  const int64_t vocab = m.config().vocab_size;
  std::printf("model %s, prompt %lld tokens, %lld-token blocks, median of %lld\n", dir.c_str(),
              static_cast<long long>(prompt_tokens), static_cast<long long>(block_size),
              static_cast<long long>(repeats));
  std::printf("%10s %14s %14s %8s %14s %14s\n", "generated", "recompute_ms", "loaded_ms", "speedup",
              "loaded_blocks", "loaded_bytes");
  for (const int64_t n : lengths) {
    ems::context_cache_memory_pool memory;
    ems::ems_config config;
    config.block_tokens = block_size;
    ems::context_cache_client cache(memory, config, "bench@resume", m.kv_layout(block_size, false));
    resume_rig rig(m, prompt_tokens + n + 1, cache);
    protocol::request_spec spec;
    for (int64_t i = 0; i < prompt_tokens; ++i)
      spec.prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % (vocab - 2) + 2));
    spec.max_tokens = static_cast<int32_t>(n + 1);
    spec.stop_at_eos = false;
    // The client's tokens: the prefill's first, then any (the resume only checks the first).
    auto [first, first_token] = rig.prefilled(spec);
    first->table.release(rig.pool);
    spec.generated.push_back(first_token);
    for (int64_t i = 1; i < n; ++i)
      spec.generated.push_back(static_cast<int32_t>((i * 104729 + 7) % (vocab - 2) + 2));
    // A first resume, untimed, mirrors every block it fills, as the instance that died did.
    rig.mirroring = true;
    rig.resume(spec, false);
    rig.mirroring = false;
    std::vector<double> recompute, loaded;
    resume_timing last_recomputed, last_loaded;
    for (int64_t r = 0; r < repeats; ++r) {
      last_recomputed = rig.resume(spec, false);
      recompute.push_back(last_recomputed.seconds);
      last_loaded = rig.resume(spec, true);
      loaded.push_back(last_loaded.seconds);
    }
    if (last_loaded.next_token != last_recomputed.next_token)
      throw std::logic_error("loading the mirrored KV changed the next token");
    const double rc = median(recompute) * 1e3, ld = median(loaded) * 1e3;
    std::printf("%10lld %14.2f %14.2f %7.1fx %14lld %14zu\n", static_cast<long long>(n), rc, ld,
                rc / ld, static_cast<long long>(last_loaded.loaded_blocks),
                static_cast<size_t>(last_loaded.loaded_blocks) *
                    static_cast<size_t>(m.kv_layout(block_size, false).block_bytes()));
  }
  return 0;
}

} // namespace supernode::apps
