// Two implementations of the demo model agree: the PyTorch code it was trained with
// (training/demo-model/reference.py, greedy in FP32 recomputing the whole sequence each step) and
// our engine in FP32 (prefill, then decode from the paged latent cache) on the checkpoint
// `supernode model make --preset demo` expanded. Greedy tokens must be identical for 32 steps on
// English and Chinese prompts, and the logits each step chose from must agree to within
// 1e-5 of the step's largest logit magnitude (FP32 sums in another order, nothing more).
// The MTP module (what speculative decoding drafts with) must agree the same way over each final
// sequence. The untrained vocabulary rows must sit far below the best trained logit at every step.

#include "model/engine.hpp"
#include "model/kv_cache.hpp"
#include "model/safetensors.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "tiny_model.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

using namespace supernode;
using namespace supernode::testing;

namespace {

constexpr int steps = 32;
constexpr float relative_tolerance = 1e-5f;
// 129,280 rows this far below the best take at most 129280 * e^-30 ~ 1e-8 of the probability.
constexpr float untrained_margin = 30.0f;
const char* const python = "/usr/bin/python3"; // Debian's, where python3-torch installs

const std::filesystem::path training_dir =
    std::filesystem::path(SUPERNODE_SOURCE_DIR) / "training/demo-model";

std::vector<std::string> prompt_texts() {
  return {"Once upon a time",
          "In the beginning God created",
          "And the LORD spake unto Moses,",
          "床前明月光，",
          "学而时习之，",
          "人生"};
}

std::set<int32_t> trained_ids() {
  auto f = model::safetensors_file::open(training_dir / "demo-weights.safetensors");
  const auto& v = f->tensors().at("vocab_ids");
  std::vector<int32_t> ids(v.numel());
  std::memcpy(ids.data(), v.data, v.nbytes);
  return {ids.begin(), ids.end()};
}

struct pytorch_answer {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<float> logits;                    // [prompt][step][vocab]
  std::vector<std::vector<int32_t>> mtp_argmax; // per row of each final sequence
  std::vector<float> mtp_last_logits;           // [prompt][vocab]
};

// Runs reference.py on `prompts`; nothing when it fails (the test then fails naming the log).
std::optional<pytorch_answer> run_pytorch(const std::vector<std::vector<int32_t>>& prompts,
                                          const std::filesystem::path& work, int64_t vocab) {
  std::filesystem::create_directories(work);
  std::ofstream(work / "request.json") << nlohmann::json{{"prompts", prompts}, {"steps", steps}};
  const std::string cmd = std::string(python) + " " + (training_dir / "reference.py").string() +
                          " --model " + demo_model_dir().string() + " --request " +
                          (work / "request.json").string() + " --out " + (work / "out").string() +
                          " > " + (work / "log.txt").string() + " 2>&1";
  if (std::system(cmd.c_str()) != 0) return std::nullopt;
  pytorch_answer a;
  const auto j = nlohmann::json::parse(std::ifstream(work / "out.json"));
  a.tokens = j["tokens"].get<std::vector<std::vector<int32_t>>>();
  a.mtp_argmax = j["mtp_argmax"].get<std::vector<std::vector<int32_t>>>();
  a.logits.resize(prompts.size() * steps * vocab);
  a.mtp_last_logits.resize(prompts.size() * vocab);
  std::ifstream bin(work / "out.bin", std::ios::binary);
  for (auto* v : {&a.logits, &a.mtp_last_logits})
    bin.read(reinterpret_cast<char*>(v->data()),
             static_cast<std::streamsize>(v->size() * sizeof(float)));
  if (!bin) return std::nullopt;
  return a;
}

float max_abs(std::span<const float> v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

float relative_difference(std::span<const float> got, std::span<const float> want) {
  float diff = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, std::fabs(got[i] - want[i]));
  return diff / max_abs(want);
}

// The MTP module over a whole sequence, as speculative decoding drafts: row i from the main
// hidden state at i and token i+1. Returns every row's greedy guess and the last row's logits.
std::pair<std::vector<int32_t>, std::vector<float>>
engine_mtp(std::shared_ptr<const model::model_weights> w, const std::vector<int32_t>& seq) {
  model::transformer t(w);
  const auto n = static_cast<int64_t>(seq.size());
  model::kv_block_pool pool(t.kv_layout(16, true), (n + 15) / 16);
  model::kv_block_table table;
  table.reserve(pool, n);
  std::vector<model::sequence_step> s{{&table, 0, n, model::attention_mode::prefill}};
  std::vector<float> hidden, mtp_hidden, logits;
  t.forward(seq, s, pool, hidden);
  const std::vector<int32_t> next(seq.begin() + 1, seq.end());
  s = {{&table, 0, n - 1, model::attention_mode::prefill}};
  t.mtp_forward(0, next, hidden.data(), s, pool, mtp_hidden);
  t.mtp_logits(0, mtp_hidden.data(), n - 1, logits);
  table.release(pool);
  const int64_t vocab = w->config.vocab_size;
  std::vector<int32_t> argmax;
  for (int64_t r = 0; r + 1 < n; ++r) {
    const float* row = logits.data() + r * vocab;
    argmax.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
  }
  return {argmax, std::vector<float>(logits.end() - vocab, logits.end())};
}

} // namespace

TEST(demo_model_agreement, pytorch_and_the_engine_agree_in_fp32) {
  if (std::system((std::string(python) + " -c 'import torch' > /dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << "no python3-torch at " << python
                 << ": training/demo-model/setup.sh installs it (600 MB, not part of CI)";
  auto weights = demo_weights(model::precision::fp32);
  const int64_t vocab = weights->config.vocab_size;
  auto tok = model::tokenizer::load(demo_model_dir());
  std::vector<std::vector<int32_t>> prompts;
  for (auto& text : prompt_texts()) prompts.push_back(tok.encode(text, true));

  const auto work = std::filesystem::path(SUPERNODE_BINARY_DIR) / "demo-agreement";
  const auto torch_answer = run_pytorch(prompts, work, vocab);
  ASSERT_TRUE(torch_answer) << "reference.py failed: see " << (work / "log.txt");

  model::reference_engine engine(weights);
  const auto trained = trained_ids();
  float worst_relative = 0.0f, smallest_margin = INFINITY;
  for (size_t p = 0; p < prompts.size(); ++p) {
    model::generation_request r;
    r.prompt = prompts[p];
    r.max_tokens = steps;
    r.stop_at_eos = false;
    const auto ours = engine.generate(r).tokens;
    EXPECT_EQ(ours, torch_answer->tokens[p]) << "prompt \"" << prompt_texts()[p] << "\"";

    // The logits of every step, on the sequence both chose.
    std::vector<int32_t> seq = prompts[p];
    for (int s = 0; s < steps; ++s) {
      const auto got = engine.prompt_logits(seq);
      const std::span<const float> want(torch_answer->logits.data() + (p * steps + s) * vocab,
                                        vocab);
      float best_trained = -INFINITY, best_untrained = -INFINITY;
      for (int64_t v = 0; v < vocab; ++v) {
        float& best = trained.count(static_cast<int32_t>(v)) ? best_trained : best_untrained;
        best = std::max(best, got[v]);
      }
      worst_relative = std::max(worst_relative, relative_difference(got, want));
      smallest_margin = std::min(smallest_margin, best_trained - best_untrained);
      seq.push_back(torch_answer->tokens[p][s]);
    }
    const auto [mtp_argmax, mtp_last] = engine_mtp(weights, seq);
    EXPECT_EQ(mtp_argmax, torch_answer->mtp_argmax[p]) << "MTP, prompt " << p;
    worst_relative =
        std::max(worst_relative,
                 relative_difference(
                     mtp_last, std::span(torch_answer->mtp_last_logits).subspan(p * vocab, vocab)));
  }
  ::testing::Test::RecordProperty("worst_relative_logit_difference",
                                  std::to_string(worst_relative));
  ::testing::Test::RecordProperty("smallest_untrained_margin", std::to_string(smallest_margin));
  std::printf("worst relative logit difference %.3g, smallest untrained margin %.1f\n",
              worst_relative, smallest_margin);
  EXPECT_LT(worst_relative, relative_tolerance);
  EXPECT_GT(smallest_margin, untrained_margin);
}

// What CI checks without torch: the PyTorch run recorded by `reference.py --record` (the
// prompts, tokens and MTP guesses, and each step's 16 largest logits). The engine must choose
// the same tokens and guesses and give those logits within the same relative tolerance; the
// fixture's prompts must be this tokenizer's encoding of the texts, so it cannot go stale
// unnoticed. Re-recorded by training/demo-model/record-reference.sh whenever the weights change.
TEST(demo_model_agreement, the_engine_matches_the_recorded_pytorch_run) {
  const auto fixture =
      nlohmann::json::parse(std::ifstream(std::filesystem::path(SUPERNODE_SOURCE_DIR) /
                                          "tests/model/data/demo_pytorch_reference.json"));
  ASSERT_EQ(fixture["steps"], steps);
  auto weights = demo_weights(model::precision::fp32);
  auto tok = model::tokenizer::load(demo_model_dir());
  const auto texts = prompt_texts();
  ASSERT_EQ(fixture["prompts"].size(), texts.size());
  model::reference_engine engine(weights);
  float worst_relative = 0.0f;
  for (size_t p = 0; p < texts.size(); ++p) {
    const auto prompt = tok.encode(texts[p], true);
    ASSERT_EQ(fixture["prompts"][p].get<std::vector<int32_t>>(), prompt) << texts[p];
    const auto want = fixture["tokens"][p].get<std::vector<int32_t>>();
    model::generation_request r;
    r.prompt = prompt;
    r.max_tokens = steps;
    r.stop_at_eos = false;
    EXPECT_EQ(engine.generate(r).tokens, want) << "prompt \"" << texts[p] << "\"";
    std::vector<int32_t> seq = prompt;
    for (int s = 0; s < steps; ++s) {
      const auto got = engine.prompt_logits(seq);
      const auto& step = fixture["top_logits"][p][s];
      const float scale = step["scale"].get<float>();
      for (auto& [id, value] : step["top"].get<std::vector<std::pair<int32_t, float>>>())
        worst_relative = std::max(worst_relative, std::fabs(got[id] - value) / scale);
      seq.push_back(want[s]);
    }
    EXPECT_EQ(engine_mtp(weights, seq).first, fixture["mtp_argmax"][p].get<std::vector<int32_t>>())
        << "MTP, prompt " << p;
  }
  std::printf("worst relative difference at the recorded logits %.3g\n", worst_relative);
  EXPECT_LT(worst_relative, relative_tolerance);
}
