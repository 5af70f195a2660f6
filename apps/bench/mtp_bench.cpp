#include "apps/bench/mtp_bench.hpp"

#include "apps/cli_args.hpp"
#include "apps/commands.hpp"
#include "kernels/thread_pool.hpp"
#include "model/engine.hpp"
#include "model/tokenizer.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

namespace supernode::apps {

namespace {

// Prompts from text the demo model was trained on (so its MTP module drafts as in use), cut or
// repeated to `tokens`; a batch cycles through them.
std::vector<std::vector<int32_t>> bench_prompts(const model::tokenizer& tok, int64_t tokens) {
  std::vector<std::vector<int32_t>> out;
  for (const char* text :
       {"In the beginning God created the heaven and the earth.",
        "And God said, Let there be light: and there was light.", "The LORD is my shepherd;",
        "Blessed are the meek: for they shall inherit the earth.", "床前明月光，疑是地上霜。",
        "学而时习之，不亦说乎？"}) {
    auto ids = tok.encode(text, true);
    std::vector<int32_t> p;
    while (static_cast<int64_t>(p.size()) < tokens) p.insert(p.end(), ids.begin(), ids.end());
    p.resize(tokens);
    out.push_back(std::move(p));
  }
  return out;
}

struct run_figures {
  double seconds = 0; // decode time (the batch's)
  int64_t tokens = 0; // decoded after the first, over the batch
  int64_t drafted = 0, accepted = 0;
  std::vector<std::vector<int32_t>> outputs;
};

} // namespace

int run_mtp_bench(cli_args& args) {
  const auto dir = resolve_model_dir(args.take("--model"));
  const auto batches = parse_id_list(args.take_or("--batches", "1,8,32,64"), "--batches");
  const auto depths = parse_id_list(args.take_or("--drafts", "0,1,2,3"), "--drafts");
  const int64_t prompt_tokens = args.take_int("--prompt-tokens", 32, 1, 65536);
  const int32_t tokens = static_cast<int32_t>(args.take_int("--tokens", 64, 2, 65536));
  const int64_t draft_vocab = args.take_int("--draft-vocab", 0, 0, int64_t{1} << 24);
  if (auto threads = args.take_int("--threads", 0, 0, 1024); threads > 0)
    kernels::thread_pool::configure_shared(static_cast<int>(threads));
  args.expect_consumed("bench mtp");
  if (std::find(depths.begin(), depths.end(), 0) == depths.end())
    throw usage_error("--drafts must include 0 (the baseline every gain is against)");

  model::load_options lo;
  lo.load_mtp = true;
  auto weights = model::model_weights::load(dir, lo);
  const auto prompts = bench_prompts(model::tokenizer::load(dir), prompt_tokens);
  std::printf("model %s, %d threads, prompts of %lld tokens, %d generated each (EOS ignored)\n",
              dir.string().c_str(), kernels::thread_pool::shared().size(),
              static_cast<long long>(prompt_tokens), tokens);
  std::printf("%6s %6s %10s %10s %9s %12s %10s %10s\n", "batch", "drafts", "accepted", "accept_len",
              "tpot_ms", "tokens_per_s", "gain", "adaptive");
  for (const int64_t batch : batches) {
    std::vector<model::generation_request> rs(batch);
    for (int64_t i = 0; i < batch; ++i) {
      rs[i].prompt = prompts[i % prompts.size()];
      rs[i].max_tokens = tokens;
      rs[i].stop_at_eos = false;
    }
    std::map<int64_t, run_figures> by_depth;
    for (const int64_t k : depths) {
      model::engine_options eo;
      eo.mtp_drafts = k;
      eo.mtp_draft_vocab = draft_vocab;
      eo.max_context = prompt_tokens + tokens;
      eo.kv_blocks = batch * ((prompt_tokens + tokens + 15) / 16 + 1);
      model::reference_engine engine(weights, eo);
      auto results = engine.generate_batch(rs);
      auto& f = by_depth[k];
      for (auto& r : results) {
        f.seconds = r.decode_ms_per_token * static_cast<double>(r.tokens.size() - 1) / 1e3;
        f.tokens += static_cast<int64_t>(r.tokens.size()) - 1;
        f.drafted += r.drafted_tokens;
        f.accepted += r.accepted_tokens;
        f.outputs.push_back(std::move(r.tokens));
      }
      if (f.outputs != by_depth[0].outputs && k != 0)
        throw std::logic_error("greedy tokens with " + std::to_string(k) +
                               " drafts differ from those without: a determinism bug");
    }
    // The adaptive rule's pick at this batch: the depth of the most tokens per second, which
    // is what it maximises (E(k) / T(b, k)) from the same two measurements.
    const double base_rate = static_cast<double>(by_depth[0].tokens) / by_depth[0].seconds;
    int64_t best = 0;
    double best_rate = 0;
    for (const auto& [k, f] : by_depth) {
      const double rate = static_cast<double>(f.tokens) / f.seconds;
      if (rate > best_rate) {
        best_rate = rate;
        best = k;
      }
    }
    for (const auto& [k, f] : by_depth) {
      const double rate = static_cast<double>(f.tokens) / f.seconds;
      const double sequence_steps =
          static_cast<double>(f.tokens) - static_cast<double>(f.accepted); // one emitted each
      std::printf("%6lld %6lld %9.0f%% %10.2f %9.2f %12.0f %9.2fx %10s\n",
                  static_cast<long long>(batch), static_cast<long long>(k),
                  f.drafted > 0
                      ? 100.0 * static_cast<double>(f.accepted) / static_cast<double>(f.drafted)
                      : 0.0,
                  static_cast<double>(f.tokens) / sequence_steps,
                  1e3 * f.seconds / (static_cast<double>(f.tokens) / static_cast<double>(batch)),
                  rate, rate / base_rate, k == best ? "<- picks" : "");
    }
  }
  return 0;
}

} // namespace supernode::apps
