#include "model/perplexity.hpp"

#include "model/kv_cache.hpp"
#include "model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace supernode::model {

sequence_score score_sequences(std::shared_ptr<const model_weights> weights,
                               std::span<const std::vector<int32_t>> sequences) {
  const auto& c = weights->config;
  constexpr int64_t block_size = 16;
  int64_t longest = 0;
  for (auto& s : sequences) longest = std::max<int64_t>(longest, static_cast<int64_t>(s.size()));
  if (longest > c.max_position_embeddings)
    throw std::invalid_argument("score_sequences: a sequence of " + std::to_string(longest) +
                                " tokens is longer than the model's context");
  transformer model(weights);
  kv_block_pool pool(model.kv_layout(block_size, false), (longest + block_size - 1) / block_size);
  sequence_score total;
  std::vector<float> hidden, logits;
  for (auto& seq : sequences) {
    if (seq.size() < 2) continue;
    kv_block_table table;
    kv_tables_guard guard(pool, std::span(&table, 1));
    const auto n = static_cast<int64_t>(seq.size());
    table.reserve(pool, n);
    std::vector<sequence_step> steps{{&table, 0, n, attention_mode::prefill}};
    model.forward(seq, steps, pool, hidden);
    model.logits(hidden.data(), n - 1, logits);
    for (int64_t i = 0; i + 1 < n; ++i) {
      const float* row = logits.data() + i * c.vocab_size;
      const float* best = std::max_element(row, row + c.vocab_size);
      double sum = 0.0;
      for (int64_t v = 0; v < c.vocab_size; ++v)
        sum += std::exp(static_cast<double>(row[v] - *best));
      const int32_t target = seq[i + 1];
      total.nll += std::log(sum) - (row[target] - *best);
      total.top1_right += (best - row) == target;
      ++total.predicted;
    }
  }
  return total;
}

} // namespace supernode::model
