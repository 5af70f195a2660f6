#include "apps/bench/model_bench.hpp"

#include "apps/bench/attention_kernel_bench.hpp"
#include "apps/bench/attention_scores_bench.hpp"
#include "apps/bench/expert_schedule_bench.hpp"
#include "apps/bench/kernel_bench_common.hpp"
#include "apps/bench/kernel_bench_machine.hpp"
#include "apps/bench/weight_pages_bench.hpp"
#include "apps/cli_args.hpp"
#include "apps/heap_huge_pages.hpp"
#include "kernels/kernel_isa.hpp"
#include "kernels/thread_pool.hpp"
#include "model/checkpoint_maker.hpp"
#include "model/engine.hpp"
#include "services/gateway/api_keys.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <sys/resource.h>

namespace supernode::apps {

namespace {

using clock_type = std::chrono::steady_clock;

using kernel_bench::median;

std::filesystem::path small_model_dir(const std::optional<std::string>& arg) {
  if (arg) return *arg;
  const char* home = std::getenv("SUPERNODE_HOME");
  return model::ensure_checkpoint(std::filesystem::path(home ? home : ".") / "models" / "small",
                                  "small", 1);
}

using weights_ptr = std::shared_ptr<const model::model_weights>;

// User + system time of every thread of this process so far.
// This process's CPU time (its threads' user + system) and page faults (first touches of fresh
// memory, mostly), read together.
struct process_usage {
  double cpu_seconds;
  int64_t page_faults;
};
process_usage usage_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return {secs(u.ru_utime) + secs(u.ru_stime),
          static_cast<int64_t>(u.ru_minflt) + static_cast<int64_t>(u.ru_majflt)};
}

// What the gateway adds to every /v1/* request with API keys configured: hash the presented key
// and compare it with each of `keys` digests in constant time; half the checks hit (the last
// key, so a hit costs what a miss does), half miss. Set beside a decode step.
nlohmann::json api_key_check_row(int64_t keys, int64_t checks) {
  auto key = [](int64_t i) { return "sk-bench-" + std::to_string(1000000 + i) + "-0123456789ab"; };
  std::string text;
  for (int64_t i = 0; i < keys; ++i) text += key(i) + "\n";
  const auto table = services::gateway::api_key_table::parse(text, "bench");
  const std::string presented[] = {key(keys - 1), key(keys)};
  int64_t found = 0;
  const auto start = clock_type::now();
  for (int64_t i = 0; i < checks; ++i) found += table.find(presented[i & 1]) != nullptr;
  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
  if (found != (checks + 1) / 2) throw std::logic_error("api key check: wrong matches");
  return {{"keys", keys}, {"checks", checks}, {"ns_per_check", seconds / checks * 1e9}};
}

// Decode: `batch` sequences with a short prompt, then `steps` timed single-token steps; the
// median step against the machine's read bandwidth `bw_all`.
nlohmann::json decode_row(const weights_ptr& weights, int64_t batch, int64_t steps, double bw_all) {
  const auto& c = weights->config;
  const int64_t prompt_len = 32;
  model::engine_options eo;
  eo.block_size = 16;
  eo.max_context = 4096;
  eo.kv_blocks = 32 * ((prompt_len + steps + 2 + 15) / 16) + 8;
  model::reference_engine engine(weights, eo);
  auto& m = engine.model();
  std::vector<model::kv_block_table> tables(batch);
  std::vector<model::sequence_step> st;
  std::vector<int32_t> tokens;
  for (int64_t b = 0; b < batch; ++b) {
    tables[b].reserve(engine.pool(), prompt_len + steps + 1);
    st.push_back({&tables[b], 0, prompt_len, model::attention_mode::prefill});
    auto p = synthetic_prompt(prompt_len, c.vocab_size, b);
    tokens.insert(tokens.end(), p.begin(), p.end());
  }
  std::vector<float> hidden, logits;
  m.forward(tokens, st, engine.pool(), hidden);
  std::vector<double> times, layer_times, logits_times;
  uint64_t bytes = 0, layer_bytes = 0;
  for (int64_t s = 0; s < steps; ++s) {
    tokens.assign(batch, 0);
    st.clear();
    for (int64_t b = 0; b < batch; ++b) {
      tokens[b] = static_cast<int32_t>((s * 31 + b * 17 + 5) % (c.vocab_size - 2) + 2);
      st.push_back({&tables[b], prompt_len + s, 1, model::attention_mode::decode});
    }
    m.reset_counters();
    auto t0 = clock_type::now();
    m.forward(tokens, st, engine.pool(), hidden);
    layer_bytes = m.streamed_weight_bytes();
    auto t1 = clock_type::now();
    m.logits(hidden.data(), batch, logits);
    auto t2 = clock_type::now();
    times.push_back(std::chrono::duration<double>(t2 - t0).count());
    layer_times.push_back(std::chrono::duration<double>(t1 - t0).count());
    logits_times.push_back(std::chrono::duration<double>(t2 - t1).count());
    bytes = m.streamed_weight_bytes();
  }
  for (auto& t : tables) t.release(engine.pool());
  const double step = median(times);
  // The step split in two: the layers (many small matmuls with attention, routing and pool
  // hand-offs between them) and the lm_head (one long stream), each against the same probe.
  auto part = [&](double seconds, uint64_t part_bytes) {
    return nlohmann::json{{"ms", seconds * 1e3},
                          {"weight_bytes", part_bytes},
                          {"fraction_of_read_bandwidth", part_bytes / seconds / 1e9 / bw_all}};
  };
  return {{"batch", batch},
          {"layers", part(median(layer_times), layer_bytes)},
          {"lm_head", part(median(logits_times), bytes - layer_bytes)},
          {"step_ms", step * 1e3},
          {"tokens_per_s", batch / step},
          {"weight_bytes_per_step", bytes},
          {"effective_weight_gbs", bytes / step / 1e9},
          {"fraction_of_read_bandwidth", bytes / step / 1e9 / bw_all}};
}

// Prefill: one prompt of `n` tokens, timed end to end (matmuls, attention, lm_head of the
// last), against the INT8 peak of all threads; the fastest of `repeats` runs (on a shared
// machine the slower ones measure the neighbours), and the least CPU time of them. Each run
// also gets its own peak probe just before it (`peak_now`), and the run's rate over that
// probe is its paired fraction: the host's clock and neighbours swing both alike within a
// fraction of a second, where the single probe of the whole bench may have caught another
// phase (it moved 1,740-1,920 GOPS between runs of a minute apart on the Zen 5 guest).
nlohmann::json prefill_row(const weights_ptr& weights, int64_t n, double int8_peak, int64_t repeats,
                           const std::function<double()>& peak_now) {
  const auto& c = weights->config;
  model::engine_options pe;
  pe.block_size = 16;
  pe.max_context = n + 16;
  model::reference_engine engine(weights, pe);
  auto& m = engine.model();
  model::kv_block_table table;
  table.reserve(engine.pool(), n);
  std::vector<model::sequence_step> st{{&table, 0, n, model::attention_mode::prefill}};
  auto prompt = synthetic_prompt(n, c.vocab_size, 7);
  std::vector<float> hidden, logits;
  double secs = 0.0, cpu_secs = 0.0, first_secs = 0.0;
  int64_t first_faults = 0, faults = 0;
  std::vector<double> paired; // none without an INT8 path to probe (the portable kernels)
  // The INT8 matmul operations of the run just made (the same for every run).
  const auto ops_of_run = [&] { return 2.0 * static_cast<double>(m.matmul_macs()); };
  for (int64_t r = 0; r < repeats; ++r) {
    const double peak = peak_now();
    m.reset_counters();
    const process_usage before = usage_now();
    auto t0 = clock_type::now();
    m.forward(prompt, st, engine.pool(), hidden);
    m.logits(hidden.data() + (n - 1) * c.hidden_size, 1, logits);
    const double t = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (peak > 0.0) paired.push_back(ops_of_run() / t / 1e9 / peak);
    const process_usage after = usage_now();
    const double cpu = after.cpu_seconds - before.cpu_seconds;
    const int64_t run_faults = after.page_faults - before.page_faults;
    if (r == 0) first_secs = t, first_faults = run_faults;
    if (r == 0 || t < secs) faults = run_faults;
    secs = r == 0 ? t : std::min(secs, t);
    cpu_secs = r == 0 ? cpu : std::min(cpu_secs, cpu);
  }
  table.release(engine.pool());
  const double ops = ops_of_run();
  const double gops = ops / secs / 1e9;
  // The same work per CPU-second of this process (its threads' user + system time, the pool's
  // spinning included) against one core's peak: what the wall clock would show on an idle
  // machine, as far as the neighbours leave our caches alone.
  const double per_core_peak = int8_peak / kernels::thread_pool::shared().size();
  // The first run of a fresh engine (its scratch and KV cache touched for the first time: what
  // a new prefill instance's first prompt of this length costs) apart from the best run.
  nlohmann::json row = {
      {"prompt_tokens", n},
      {"first_run_seconds", first_secs},
      {"first_run_tokens_per_s", n / first_secs},
      {"first_run_page_faults", first_faults},
      {"page_faults", faults},
      {"seconds", secs},
      {"cpu_seconds", cpu_secs},
      {"runs", repeats},
      {"tokens_per_s", n / secs},
      {"matmul_gops", gops},
      {"fraction_of_int8_peak", gops / int8_peak},
      {"fraction_of_int8_peak_by_cpu_time", ops / cpu_secs / 1e9 / per_core_peak}};
  if (!paired.empty()) row["paired_fraction_of_int8_peak"] = kernel_bench::spread(paired);
  return row;
}

} // namespace

std::vector<int32_t> synthetic_prompt(int64_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<int32_t>((i * 7919 + salt * 104729 + 13) % (vocab - 2) + 2);
  return p;
}

int run_model_bench(cli_args& args) {
  const auto dir = small_model_dir(args.take("--model"));
  if (auto threads = args.take_int("--threads", 0, 0, 1024); threads > 0)
    kernels::thread_pool::configure_shared(static_cast<int>(threads));
  if (args.take_flag("--weight-pages")) {
    args.expect_consumed("bench model --weight-pages");
    std::printf("%s\n", weight_pages_report(12).dump(2).c_str());
    return 0;
  }
  if (args.take_flag("--attention-scores")) {
    attention_scores_options o;
    o.model = dir;
    o.prompt_tokens = args.take_int("--prompt-tokens", o.prompt_tokens, 1, 1 << 20);
    args.expect_consumed("bench model --attention-scores");
    std::printf("%s\n", attention_scores_report(o).dump(2).c_str());
    return 0;
  }
  const bool attention_kernel = args.take_flag("--attention-kernel");
  const bool expert_schedule = args.take_flag("--expert-schedule");
  const bool quick = args.take_flag("--quick");
  // Only the prefill rows, each the best of this many runs (for profiling and A/B runs).
  const int64_t prefill_repeats = args.take_int("--prefill-only", 0, 0, 100);
  // Only the decode rows, each over this many timed steps (for profiling and A/B runs).
  const int64_t decode_steps = args.take_int("--decode-only", 0, 0, 10000);
  const int64_t decode_batch = args.take_int("--batch", 0, 0, 32); // 0: batches 1, 8 and 32
  if (decode_batch != 0 && decode_batch != 1 && decode_batch != 8 && decode_batch != 32)
    throw std::invalid_argument("bench model: --batch must be 1, 8 or 32 (the decode rows)");
  if (prefill_repeats > 0 && decode_steps > 0)
    throw std::invalid_argument("bench model: --prefill-only and --decode-only exclude each other");
  const auto prec = model::parse_precision(args.take_or("--precision", "int8"));
  args.expect_consumed("bench model");
  const int threads = kernels::thread_pool::shared().size();

  model::load_options lo;
  lo.prec = prec;
  lo.load_mtp = false;
  lo.progress = true;
  auto weights = model::model_weights::load(dir, lo);
  const auto& c = weights->config;
  if (attention_kernel) {
    // Whole prompts, and chunks after a long prefix (chunked prefill, speculative verification).
    const nlohmann::json rows =
        attention_kernel_report(c, {{0, 512}, {0, 2048}, {2032, 16}, {2047, 1}});
    std::printf("%s\n", rows.dump(2).c_str());
    return 0;
  }
  if (expert_schedule) {
    std::printf("%s\n", expert_schedule_report(*weights, {64, 256, 512, 2048}).dump(2).c_str());
    return 0;
  }

  nlohmann::json out;
  out["model"] = dir.string();
  out["precision"] = model::precision_name(prec);
  out["threads"] = threads;
  out["parameters"] = c.parameter_count();
  const double bw_one = kernel_bench::read_bandwidth_gbs(1);
  const double bw_all = threads == 1 ? bw_one : kernel_bench::read_bandwidth_gbs(threads);
  out["read_bandwidth_gbs"] = {{"one_thread", bw_one}, {"all_threads", bw_all}};
  // The ceiling of the INT8 path the kernels actually run on this CPU, every thread running it
  // at once (beside one core's rate times the threads, which it matches only on separate cores).
  const auto isa = kernels::active_kernel_isa();
  const double int8_peak = kernel_bench::exact_int8_peak_gops(isa, threads);
  out["kernel_isa"] = kernels::kernel_isa_name(isa);
  out["heap_huge_pages"] = heap_huge_pages_requested();
  out["int8_peak_gops_all_threads"] = int8_peak;
  out["int8_peak_gops_one_core_times_threads"] = kernel_bench::exact_int8_peak_gops(isa) * threads;

  if (prefill_repeats == 0 && decode_steps == 0) {
    const int64_t checks = quick ? 20000 : 200000;
    for (int64_t keys : {1, 16, 256})
      out["api_key_check"].push_back(api_key_check_row(keys, checks));
  }
  if (prefill_repeats == 0) {
    const int64_t steps = decode_steps > 0 ? decode_steps : quick ? 4 : 12;
    for (int64_t batch : {1, 8, 32})
      if (decode_batch == 0 || batch == decode_batch)
        out["decode"].push_back(decode_row(weights, batch, steps, bw_all));
  }
  if (decode_steps > 0) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  const auto lengths = quick ? std::vector<int64_t>{512} : std::vector<int64_t>{512, 2048};
  for (int64_t n : lengths)
    out["prefill"].push_back(
        prefill_row(weights, n, int8_peak, std::max<int64_t>(1, prefill_repeats),
                    [&] { return kernel_bench::exact_int8_peak_gops(isa, threads); }));
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

} // namespace supernode::apps
