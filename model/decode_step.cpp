#include "model/decode_step.hpp"

#include <algorithm>

namespace supernode::model {

namespace {
// Sampled with the min(1, p/q) rule: the draft distributions are kept for verification.
bool standard_sampled(const decode_sequence_step& s) {
  return s.sampling.temperature > 0.0f && s.acceptance == draft_acceptance::standard;
}
} // namespace

void decode_stepper::set_draft_vocabulary(int64_t n, const std::filesystem::path& ranked_file) {
  draft_head_ = n == 0 ? nullptr
                       : std::make_unique<draft_head>(
                             model_.mtp_head(0),
                             draft_vocabulary(model_.config().vocab_size, n, ranked_file));
}

void decode_stepper::draft(std::span<decode_sequence_step> sequences, kv_block_pool& pool) {
  const int64_t h = model_.config().hidden_size, vocab = model_.config().vocab_size;
  const size_t n = sequences.size();
  drafts_.resize(n);
  draft_probabilities_.resize(n);
  for (size_t i = 0; i < n; ++i) drafts_[i].clear();
  // Depth 0: each drafting sequence's MTP rows up to its latest position, in one MTP forward;
  // the last row of each drafts its first token. A sequence not drafting this step (the depth
  // is 0, or it has one token left) has its rows computed too once it holds catch_up_rows of
  // them, so what it keeps stays bounded and its MTP KV complete for when it drafts again.
  drafting_.clear();
  computed_.assign(n, false);
  tokens_.clear();
  steps_.clear();
  mtp_in_.clear();
  std::vector<int64_t> last_row; // of each drafting sequence in the MTP forward
  int64_t rows = 0;
  for (size_t i = 0; i < n; ++i) {
    auto& s = sequences[i];
    if (!s.mtp || s.mtp->broken || s.mtp->rows() == 0 || s.mtp->end_position() != s.table->tokens())
      continue;
    const bool drafts = s.max_drafts > 0 && s.feed.size() == 1;
    if (!drafts && s.mtp->rows() < catch_up_rows) continue;
    computed_[i] = true;
    tokens_.insert(tokens_.end(), s.mtp->following.begin(), s.mtp->following.end());
    mtp_in_.insert(mtp_in_.end(), s.mtp->hidden.begin(), s.mtp->hidden.end());
    steps_.push_back({s.table, s.mtp->first_position, s.mtp->rows(), attention_mode::decode});
    rows += s.mtp->rows();
    if (drafts) {
      drafting_.push_back(i);
      last_row.push_back(rows - 1);
    }
  }
  if (steps_.empty()) return;
  model_.mtp_forward(0, tokens_, mtp_in_.data(), steps_, pool, mtp_hidden_);
  if (drafting_.empty()) return;
  rows_.resize(drafting_.size() * h);
  for (size_t a = 0; a < drafting_.size(); ++a)
    std::copy_n(mtp_hidden_.data() + last_row[a] * h, h, rows_.data() + a * h);
  // Depth j drafts the token at index next_index + j; past the first, the MTP module runs again
  // on its own output (as vLLM and SGLang apply DeepSeek's single MTP layer), one row each at
  // position tokens() + j - 1, whose KV the next step's first rows overwrite.
  std::vector<size_t> active = drafting_;
  for (int64_t depth = 0;; ++depth) {
    int64_t width = vocab; // of a row of mtp_logits_: the draft vocabulary's tokens
    if (draft_head_) {
      draft_head_->logits(rows_.data(), static_cast<int64_t>(active.size()), mtp_logits_);
      width = draft_head_->size();
    } else {
      model_.mtp_logits(0, rows_.data(), static_cast<int64_t>(active.size()), mtp_logits_);
    }
    // A draft's index in the draft vocabulary, as a token id.
    auto token_of = [&](int32_t d) { return draft_head_ ? draft_head_->ids()[d] : d; };
    std::vector<size_t> deeper;
    tokens_.clear();
    steps_.clear();
    mtp_in_.clear();
    for (size_t a = 0; a < active.size(); ++a) {
      auto& s = sequences[active[a]];
      auto& probabilities = draft_probabilities_[active[a]];
      const auto draft_logits = std::span(mtp_logits_.data() + a * width, width);
      const uint64_t index = s.next_index + static_cast<uint64_t>(depth);
      int32_t d = 0;
      if (standard_sampled(s)) {
        // q over the whole vocabulary, zero outside the draft vocabulary: what the draft was
        // drawn from, as min(1, p/q) needs it.
        probabilities.resize((depth + 1) * vocab);
        const auto q = std::span(probabilities).subspan(depth * vocab, vocab);
        if (draft_head_) {
          draft_q_.resize(width);
          d = token_of(kernels::sample_draft(draft_logits, s.sampling, index, draft_q_));
          std::fill(q.begin(), q.end(), 0.0f);
          for (int64_t t = 0; t < width; ++t) q[draft_head_->ids()[t]] = draft_q_[t];
        } else {
          d = kernels::sample_draft(draft_logits, s.sampling, index, q);
        }
      } else {
        // The target's own draw at this index, from the same uniform: the two draws are
        // coupled, so a draft distribution close to the target's mostly gives its token.
        d = token_of(kernels::sample(draft_logits, s.sampling, index));
      }
      drafts_[active[a]].push_back(d);
      if (depth + 1 < s.max_drafts) {
        deeper.push_back(active[a]);
        tokens_.push_back(d);
        mtp_in_.insert(mtp_in_.end(), rows_.begin() + a * h, rows_.begin() + (a + 1) * h);
        steps_.push_back({s.table, s.table->tokens() + depth, 1, attention_mode::decode});
      }
    }
    if (deeper.empty()) return;
    model_.mtp_forward(0, tokens_, mtp_in_.data(), steps_, pool, mtp_hidden_);
    rows_ = mtp_hidden_;
    active = std::move(deeper);
  }
}

void decode_stepper::step(std::span<decode_sequence_step> sequences, kv_block_pool& pool,
                          std::vector<decode_sequence_outcome>& out) {
  const int64_t h = model_.config().hidden_size, vocab = model_.config().vocab_size;
  const size_t n = sequences.size();
  out.assign(n, {});
  if (n == 0) return;
  draft(sequences, pool);

  // The verify forward: every sequence's feed and drafts, in the decode arithmetic.
  tokens_.clear();
  steps_.clear();
  first_row_.resize(n);
  int64_t row = 0;
  bool one_row_each = true;
  for (size_t i = 0; i < n; ++i) {
    auto& s = sequences[i];
    const auto m = static_cast<int64_t>(s.feed.size() + drafts_[i].size());
    first_row_[i] = row;
    tokens_.insert(tokens_.end(), s.feed.begin(), s.feed.end());
    tokens_.insert(tokens_.end(), drafts_[i].begin(), drafts_[i].end());
    steps_.push_back({s.table, s.table->tokens(), m, attention_mode::decode});
    row += m;
    one_row_each &= m == 1;
  }
  if (forward_)
    forward_(tokens_, steps_, pool, hidden_);
  else
    model_.forward(tokens_, steps_, pool, hidden_);

  // Logits of each sequence's last fed position and of its drafted ones.
  const float* rows = hidden_.data();
  int64_t logit_rows = static_cast<int64_t>(n);
  if (!one_row_each) {
    rows_.clear();
    for (size_t i = 0; i < n; ++i) {
      const int64_t first = first_row_[i] + static_cast<int64_t>(sequences[i].feed.size()) - 1;
      const int64_t count = 1 + static_cast<int64_t>(drafts_[i].size());
      rows_.insert(rows_.end(), hidden_.begin() + first * h, hidden_.begin() + (first + count) * h);
    }
    rows = rows_.data();
    logit_rows = static_cast<int64_t>(rows_.size()) / h;
  }
  model_.logits(rows, logit_rows, logits_);

  const float* logits = logits_.data();
  for (size_t i = 0; i < n; ++i) {
    auto& s = sequences[i];
    const auto& drafts = drafts_[i];
    const auto d = static_cast<int64_t>(drafts.size());
    auto& o = out[i];
    o.drafted = d;
    for (int64_t j = 0; j <= d; ++j) {
      const auto target = std::span(logits + j * vocab, vocab);
      const uint64_t index = s.next_index + static_cast<uint64_t>(j);
      if (j == d) {
        o.tokens.push_back(kernels::sample(target, s.sampling, index));
        break;
      }
      kernels::speculative_choice choice;
      if (standard_sampled(s)) {
        choice = kernels::verify_draft(target,
                                       std::span(draft_probabilities_[i]).subspan(j * vocab, vocab),
                                       drafts[j], s.sampling, index);
      } else {
        const int32_t token = kernels::sample(target, s.sampling, index);
        choice = {token, token == drafts[j]};
      }
      o.tokens.push_back(choice.token);
      if (!choice.accepted) break;
    }
    logits += (1 + d) * vocab;
    commit(s, hidden_.data() + first_row_[i] * h, o, computed_[i]);
  }
}

void decode_stepper::commit(decode_sequence_step& s, const float* step_hidden,
                            decode_sequence_outcome& out, bool rows_computed) {
  const int64_t h = model_.config().hidden_size;
  const auto fed = static_cast<int64_t>(s.feed.size());
  const int64_t first = s.table->tokens(), accepted = out.accepted();
  s.table->set_tokens(first + fed + accepted);
  if (!s.mtp) return;
  // The draft phase computed the MTP rows up to the first fed position.
  if (rows_computed) s.mtp->consumed(first);
  for (int64_t r = 0; r < fed + accepted; ++r) {
    const int32_t following = r + 1 < fed ? s.feed[r + 1] : out.tokens[r + 1 - fed];
    s.mtp->append(first + r, step_hidden + r * h, h, following);
  }
}

} // namespace supernode::model
