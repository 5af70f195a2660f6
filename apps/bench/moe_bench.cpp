#include "apps/bench/moe_bench.hpp"

#include "apps/cli_args.hpp"
#include "kernels/thread_pool.hpp"
#include "model/transformer.hpp"
#include "services/moe/expert_parallel.hpp"
#include "services/moe/local_group.hpp"
#include "services/moe/microbatch_pipeline.hpp"
#include "services/moe/skewed_routing.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

namespace supernode::apps {

namespace {

using clock_type = std::chrono::steady_clock;
using services::ep_options;
using services::expert_parallel;

// One MoE layer at DeepSeek-V3's width (hidden 7168, 256 routed experts, top-8). The protocol
// benchmark never runs the gate or the experts, so the layer holds no weights.
std::shared_ptr<const model::model_weights> dispatch_only_model(int64_t hidden) {
  auto w = std::make_shared<model::model_weights>();
  auto& c = w->config;
  c.hidden_size = hidden;
  c.n_routed_experts = 256;
  c.num_experts_per_tok = 8;
  c.num_hidden_layers = 1;
  c.first_k_dense_replace = 0;
  w->prec = model::precision::int8;
  model::layer_weights layer;
  layer.is_moe = true;
  w->layers.push_back(std::move(layer));
  return w;
}

// Runs body(rank, ep) on `ranks` threads sharing one group; returns what rank 0's body returns.
nlohmann::json run_group(
    const std::string& kind, int ranks, ep_options o, std::shared_ptr<const model::model_weights> w,
    const std::function<nlohmann::json(int, expert_parallel&, transport::rank_fabric&)>& body) {
  services::local_group_options g;
  g.fabric = kind;
  g.cluster = "bench";
  g.ranks = ranks;
  g.ep = o;
  nlohmann::json result;
  const auto errors =
      services::run_local_group(g, w, [&](int r, expert_parallel& ep, transport::rank_fabric& f) {
        auto out = body(r, ep, f);
        if (r == 0) result = std::move(out);
      });
  for (auto& e : errors)
    if (!e.empty()) throw std::runtime_error("bench moe: " + e);
  return result;
}

std::vector<float> random_rows(int64_t rows, int64_t h, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(rows * h);
  for (auto& v : x) v = d(rng);
  return x;
}

// Table 7: every rank sends `tokens` tokens (uniformly routed, 8 distinct experts each) through
// one op, `ops` times; the receivers compute nothing, so the op is the protocol alone:
// FusedDispatch (INT8 tokens to their experts' ranks) and FusedCombine (FP32 outputs back).
nlohmann::json dispatch_combine(const std::string& kind, int ranks, int64_t tokens, int ops) {
  constexpr int64_t hidden = 7168;
  auto w = dispatch_only_model(hidden);
  ep_options o;
  o.local_batch = tokens;
  return run_group(kind, ranks, o, w, [&](int r, expert_parallel& ep, transport::rank_fabric& f) {
    const auto x = random_rows(tokens, hidden, static_cast<uint32_t>(r + 1));
    std::vector<float> out(tokens * hidden);
    model::moe_routing routing;
    routing.rows = tokens;
    routing.k = 8;
    routing.weight.assign(tokens * 8, 0.125f);
    const auto experts = services::skewed_routing(256, 8, tokens, 0.0, 1000 + r);
    routing.expert.assign(experts.begin(), experts.end());
    auto no_compute = [&](std::span<model::expert_batch* const> batches) {
      for (auto* b : batches) b->out.resize(b->rows * hidden);
    };
    for (int i = 0; i < 3; ++i) ep.exchange(0, routing, x.data(), tokens, out.data(), no_compute);
    const auto before = ep.stage_times();
    const uint64_t sent = f.bytes_sent();
    const auto start = clock_type::now();
    for (int i = 0; i < ops; ++i) ep.exchange(0, routing, x.data(), tokens, out.data(), no_compute);
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    const auto t = ep.stage_times();
    nlohmann::json j;
    j["fabric"] = kind;
    j["ep"] = ranks;
    j["tokens_per_rank"] = tokens;
    j["op_us"] = seconds / ops * 1e6;
    j["dispatch_us"] = (t.dispatch_latency - before.dispatch_latency) / ops * 1e6;
    j["combine_us"] = (t.combine_latency - before.combine_latency) / ops * 1e6;
    const double bytes = static_cast<double>(f.bytes_sent() - sent) / ops;
    j["bytes_per_rank_per_op"] = bytes;
    j["rank_gbps"] = bytes / (seconds / ops) / 1e9;
    return j;
  });
}

// Decode steps of a real model over EP ranks (threads): tokens per second, the stage breakdown
// of rank 0 (Figure 20b) and, with EPLB on, the host-load balance before and after.
nlohmann::json decode_run(std::shared_ptr<const model::model_weights> w, int ranks, int64_t batch,
                          int steps, bool microbatch, int64_t eplb_interval) {
  ep_options o;
  o.local_batch = batch;
  o.microbatches = microbatch ? 2 : 1;
  o.eplb_interval = eplb_interval;
  o.redundant_per_rank = eplb_interval > 0 ? 1 : 0;
  std::atomic<int> done{0};
  return run_group("shm", ranks, o, w, [&](int r, expert_parallel& ep, transport::rank_fabric&) {
    model::transformer t(w);
    t.set_routed_experts(&ep);
    std::unique_ptr<services::microbatch_pipeline> pipeline;
    if (microbatch) pipeline = std::make_unique<services::microbatch_pipeline>(w, ep);
    const int64_t block = 16, ctx = 64 + steps;
    model::kv_block_pool pool(t.kv_layout(block, false), batch * ((ctx + block - 1) / block));
    std::vector<model::kv_block_table> tables(batch);
    std::vector<int32_t> tokens(batch);
    for (int64_t i = 0; i < batch; ++i) {
      tables[i].reserve(pool, ctx);
      tables[i].set_tokens(32); // a 32-token context, its KV left as the pool holds it
      tokens[i] = static_cast<int32_t>((r * 7919 + i * 104729) % 120000 + 10);
    }
    std::vector<float> hidden;
    std::vector<model::sequence_step> st(batch);
    auto step = [&] {
      for (int64_t i = 0; i < batch; ++i) {
        st[i] = {&tables[i], tables[i].tokens(), 1, model::attention_mode::decode};
        tables[i].set_tokens(tables[i].tokens() + 1);
      }
      hidden.clear();
      if (pipeline)
        pipeline->forward(tokens, st, pool, hidden);
      else
        t.forward(tokens, st, pool, hidden);
    };
    step(); // warm-up
    const auto before = ep.stage_times();
    const auto start = clock_type::now();
    for (int s = 1; s < steps; ++s) step();
    const double seconds = std::chrono::duration<double>(clock_type::now() - start).count();
    ++done;
    services::serve_peers_until(ep, done, ranks);
    nlohmann::json j;
    j["ep"] = ranks;
    j["batch_per_rank"] = batch;
    j["microbatch"] = microbatch;
    j["tokens_per_s"] = static_cast<double>(batch * ranks * (steps - 1)) / seconds;
    const auto after = ep.stage_times();
    nlohmann::json stages;
    for (int s = 0; s < services::ep_stage_times::count; ++s) {
      double total = 0;
      for (size_t l = 0; l < after.seconds.size(); ++l)
        total += after.seconds[l][s] - before.seconds[l][s];
      stages[services::ep_stage_times::name(s)] = total / (steps - 1) * 1e3;
    }
    j["rank0_stage_ms_per_step"] = stages;
    // Figure 20b's view: the same per MoE layer.
    nlohmann::json layers;
    for (size_t l = 0; l < after.seconds.size(); ++l) {
      nlohmann::json layer;
      for (int st = 0; st < services::ep_stage_times::count; ++st)
        layer[services::ep_stage_times::name(st)] =
            (after.seconds[l][st] - before.seconds[l][st]) / (steps - 1) * 1e3;
      layers.push_back(layer);
    }
    j["rank0_stage_ms_per_moe_layer"] = layers;
    if (eplb_interval > 0) {
      // Max/mean load of the expert hosts over one window of routed tokens, by the runtime's
      // routing rule: the first window under the uniform placement and the plan made from it,
      // and the last window under the placement then in force and its successor.
      const auto first = ep.first_rebalance(), last = ep.last_rebalance();
      j["eplb_placements"] = last.version;
      j["host_load_max_over_mean_uniform"] = first.ratio_before;
      j["host_load_max_over_mean_first_plan"] = first.ratio_after;
      j["host_load_max_over_mean_last_window"] = last.ratio_before;
    }
    return j;
  });
}

} // namespace

int run_moe_bench(cli_args& args) {
  const bool quick = args.take_flag("--quick");
  const auto model_dir = args.take_or("--model", "");
  // Which parts to run: dispatch (the protocol), microbatch and eplb (those two need --model).
  const auto only = args.take_or("--only", "dispatch,microbatch,eplb");
  const auto wanted = [&](const char* part) { return only.find(part) != std::string::npos; };
  const double skew = std::stod(args.take_or("--skew-amplitude", "1.0"));
  // Ranks are threads here, as many as 8 on 2 cores: each computes on its own thread, as a rank
  // owns its cores, instead of sharing a pool whose idle workers spin.
  kernels::thread_pool::configure_shared(static_cast<int>(args.take_int("--threads", 1, 1, 1024)));
  args.expect_consumed("bench moe");
  nlohmann::json out;
  const int ops = quick ? 20 : 200;
  // 128 tokens per rank (Table 7's load, bandwidth-bound) and 1 (latency-bound).
  for (int64_t tokens : {int64_t{128}, int64_t{1}}) {
    if (!wanted("dispatch")) break;
    nlohmann::json table;
    for (auto kind : {"shm", "zmq"})
      for (int ranks : {2, 4, 8})
        table.push_back(dispatch_combine(kind, ranks, tokens, tokens == 1 ? ops * 10 : ops));
    const auto key = std::to_string(tokens);
    out["dispatch_combine"][key + "_tokens_per_rank"] = table;
    for (auto& row : table)
      if (row["fabric"] == "zmq")
        for (auto& s : table)
          if (s["fabric"] == "shm" && s["ep"] == row["ep"]) {
            const auto ep = std::to_string(row["ep"].get<int>());
            for (auto what : {"op_us", "dispatch_us", "combine_us"})
              out["zmq_over_shm"][key + "_tokens"][what][ep] =
                  row[what].get<double>() / s[what].get<double>();
          }
  }

  if (!model_dir.empty()) {
    model::load_options lo;
    auto w = model::model_weights::load(model_dir, lo);
    const int steps = quick ? 6 : 24;
    nlohmann::json mb;
    for (int64_t batch : {8, 32, 64})
      for (bool on : {false, true})
        if (wanted("microbatch")) mb.push_back(decode_run(w, 2, batch, steps, on, 0));
    out["microbatch_decode"] = mb;
    nlohmann::json eplb;
    // The skewed workload: the same model with its gate biased towards a Zipf(1.2) set of hot
    // experts, so a few experts (and the ranks hosting them) draw most tokens.
    auto skewed = std::make_shared<model::model_weights>(*w);
    services::skew_gate(*skewed, 1.2, static_cast<float>(skew), 7);
    for (int64_t interval : {int64_t{0}, int64_t{4}})
      if (wanted("eplb")) eplb.push_back(decode_run(skewed, 4, 32, steps * 2, false, interval));
    out["eplb_skew_amplitude"] = skew;
    out["eplb_skewed_decode"] = eplb;
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

} // namespace supernode::apps
