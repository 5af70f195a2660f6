#include "model/mtp.hpp"

#include <algorithm>

namespace supernode::model {

void mtp_state::append(int64_t pos, const float* h, int64_t hidden_size, int32_t following_token) {
  if (broken) return;
  if (first_position < 0) first_position = pos;
  if (pos != end_position()) {
    broken = true;
    hidden.clear();
    following.clear();
    return;
  }
  hidden.insert(hidden.end(), h, h + hidden_size);
  following.push_back(following_token);
}

void mtp_state::consumed(int64_t next_position) {
  first_position = next_position;
  hidden.clear();
  following.clear();
}

void mtp_prefill(transformer& model, std::span<const mtp_prefill_chunk> chunks,
                 const float* main_hidden, kv_block_pool& pool) {
  const int64_t h = model.config().hidden_size;
  std::vector<int32_t> next;
  std::vector<float> rows;
  std::vector<sequence_step> steps;
  int64_t row = 0;
  for (const auto& c : chunks) {
    const auto prompt_len = static_cast<int64_t>(c.prompt.size());
    const int64_t n = std::min(c.first_pos + c.n_tokens, prompt_len - 1) - c.first_pos;
    if (n > 0) {
      next.insert(next.end(), c.prompt.begin() + c.first_pos + 1,
                  c.prompt.begin() + c.first_pos + 1 + n);
      rows.insert(rows.end(), main_hidden + row * h, main_hidden + (row + n) * h);
      steps.push_back({c.table, c.first_pos, n, attention_mode::prefill});
    }
    row += c.n_tokens;
  }
  if (steps.empty()) return;
  std::vector<float> mtp_hidden;
  model.mtp_forward(0, next, rows.data(), steps, pool, mtp_hidden);
}

mtp_state mtp_state_of_rows(int64_t first_position, std::span<const int32_t> following,
                            std::span<const float> hidden, int64_t hidden_size) {
  mtp_state s;
  if (hidden.size() != following.size() * static_cast<size_t>(hidden_size)) {
    s.broken = true;
    return s;
  }
  for (size_t r = 0; r < following.size(); ++r)
    s.append(first_position + static_cast<int64_t>(r), hidden.data() + r * hidden_size, hidden_size,
             following[r]);
  return s;
}

mtp_state mtp_state_after_prefill(int64_t prompt_tokens, std::span<const float> last_hidden,
                                  int32_t first_token) {
  return mtp_state_of_rows(prompt_tokens - 1, std::span(&first_token, 1), last_hidden,
                           static_cast<int64_t>(last_hidden.size()));
}

} // namespace supernode::model
