#include "services/decode/decode_batch.hpp"

#include "kernels/sampling.hpp"
#include "model/engine.hpp"

#include <algorithm>
#include <chrono>
#include <limits>

namespace supernode::services {

decode_batch::decode_batch(model::transformer& model, model::kv_block_pool& pool,
                           release_fn release)
    : model_(model), pool_(pool), release_(std::move(release)), stepper_(model) {}

void decode_batch::set_mtp(int64_t max_drafts, bool adaptive, model::draft_acceptance acceptance) {
  depth_ = max_drafts > 0 ? std::make_unique<mtp_depth_policy>(max_drafts, adaptive) : nullptr;
  acceptance_ = acceptance;
}

bool decode_batch::accept(decode_sequence& s, int32_t token, protocol::token_update& u) const {
  s.generated.push_back(token);
  u.tokens.push_back(token);
  const char* why =
      model::finish_reason_after(token, static_cast<int64_t>(s.generated.size()), s.spec.max_tokens,
                                 s.spec.stop_at_eos, model_.config().eos_token_id);
  if (why)
    u.finish = std::string_view(why) == "stop" ? protocol::finish_reason::stop
                                               : protocol::finish_reason::length;
  return why != nullptr;
}

protocol::token_update decode_batch::join(std::unique_ptr<decode_sequence> s, int32_t first_token) {
  protocol::token_update u;
  u.key = s->key;
  s->table.set_tokens(static_cast<int64_t>(s->spec.prompt.size()));
  // Without the rows its MTP KV continues from (none came with its KV), it never drafts.
  if (depth_ && s->mtp.first_position < 0) s->mtp.broken = true;
  if (!s->spec.generated.empty()) return resume(std::move(s), first_token);
  if (accept(*s, first_token, u)) {
    release_(*s);
    return u;
  }
  s->feed = {first_token};
  running_.push_back(std::move(s));
  return u;
}

protocol::token_update decode_batch::resume(std::unique_ptr<decode_sequence> s,
                                            int32_t first_token) {
  const auto& generated = s->spec.generated;
  protocol::token_update u;
  u.key = s->key;
  u.first_index = static_cast<int64_t>(generated.size());
  if (first_token != generated.front()) {
    u = protocol::final_update(s->key, {protocol::serving_errc::internal,
                                        "resumed request's prefill gave first token " +
                                            std::to_string(first_token) + ", not the " +
                                            std::to_string(generated.front()) + " its client has"});
    release_(*s);
    return u;
  }
  s->generated = generated;
  const auto n = static_cast<int64_t>(generated.size());
  if (const char* why =
          model::finish_reason_after(generated.back(), n, s->spec.max_tokens, s->spec.stop_at_eos,
                                     model_.config().eos_token_id)) {
    // Nothing is left to generate (its end was lost with the instance): end it here.
    u.finish = std::string_view(why) == "stop" ? protocol::finish_reason::stop
                                               : protocol::finish_reason::length;
    release_(*s);
    return u;
  }
  // KV loaded from the pool covers the first loaded_generated tokens; the last one never has
  // KV (it was sampled, not fed), so at least it is fed.
  s->feed.assign(generated.begin() + std::min(s->loaded_generated, n - 1), generated.end());
  s->table.set_tokens(static_cast<int64_t>(s->spec.prompt.size()) + n -
                      static_cast<int64_t>(s->feed.size()));
  running_.push_back(std::move(s));
  return u;
}

std::vector<std::unique_ptr<decode_sequence>> decode_batch::detach_movable() {
  std::vector<std::unique_ptr<decode_sequence>> out;
  for (auto it = running_.begin(); it != running_.end();) {
    auto& s = **it;
    const auto with_kv = static_cast<int64_t>(s.spec.prompt.size() + s.generated.size()) - 1;
    if (s.feed.size() == 1 && s.table.tokens() == with_kv) {
      out.push_back(std::move(*it));
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void decode_batch::leave(size_t index) {
  release_(*running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
}

std::vector<protocol::token_update> decode_batch::step() {
  std::vector<protocol::token_update> updates;
  if (running_.empty()) return updates;
  const auto batch = static_cast<int64_t>(running_.size());
  const int64_t depth = depth_ ? depth_->depth(batch) : 0;
  steps_.clear();
  // The drafts a sequence may take: up to the depth, less than the tokens it may still emit.
  auto drafts_of = [&](const decode_sequence& s) {
    return std::min(depth, s.spec.max_tokens - static_cast<int64_t>(s.generated.size()) - 1);
  };
  // Every sequence's token (and drafts) first; then what the budget leaves goes to catch-ups.
  fed_.assign(running_.size(), 1);
  int64_t spare = row_budget_ > 0 ? row_budget_ : std::numeric_limits<int64_t>::max();
  for (auto& s : running_)
    spare -= s->feed.size() == 1 ? 1 + std::max<int64_t>(0, drafts_of(*s)) : 1;
  for (size_t i = 0; i < running_.size(); ++i) {
    const auto more = std::min<int64_t>(static_cast<int64_t>(running_[i]->feed.size()) - 1,
                                        std::max<int64_t>(0, spare));
    fed_[i] += static_cast<size_t>(more);
    spare -= more;
  }
  for (size_t i = 0; i < running_.size(); ++i) {
    auto& s = running_[i];
    const auto generated = static_cast<int64_t>(s->generated.size());
    steps_.push_back({&s->table,
                      std::span<const int32_t>(s->feed).first(fed_[i]),
                      depth_ ? &s->mtp : nullptr,
                      fed_[i] < s->feed.size() ? 0 : drafts_of(*s),
                      {s->spec.temperature, s->spec.top_p, s->spec.top_k, s->spec.seed},
                      static_cast<uint64_t>(generated),
                      acceptance_});
  }
  // All or nothing: when the forward throws (an expert-parallel group broke), the sequences
  // are as before and the step can run again (the KV it wrote is rewritten identically).
  const auto started = std::chrono::steady_clock::now();
  stepper_.step(steps_, pool_, outcomes_);
  if (depth_)
    depth_->record_step(
        batch, depth,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  last_depth_ = depth;
  if (after_forward_)
    for (auto& s : running_) after_forward_(*s);
  std::vector<size_t> finished;
  for (size_t i = 0; i < running_.size(); ++i) {
    auto& s = *running_[i];
    if (fed_[i] < s.feed.size()) { // a catch-up cut by the budget: the token after it is known
      s.feed.erase(s.feed.begin(), s.feed.begin() + static_cast<std::ptrdiff_t>(fed_[i]));
      continue;
    }
    const auto& o = outcomes_[i];
    drafted_ += o.drafted;
    accepted_ += o.accepted();
    if (depth_ && o.drafted > 0) {
      depth_->record_sequence(o.drafted, o.accepted());
      ++drafting_steps_;
    }
    protocol::token_update u;
    u.key = s.key;
    u.first_index = static_cast<int64_t>(s.generated.size());
    bool ends = false;
    for (int32_t token : o.tokens)
      if ((ends = accept(s, token, u))) break;
    if (ends) finished.push_back(i);
    s.feed = {s.generated.back()};
    updates.push_back(std::move(u));
  }
  for (auto it = finished.rbegin(); it != finished.rend(); ++it) leave(*it);
  return updates;
}

std::vector<protocol::token_update>
decode_batch::remove_where(const std::function<bool(const protocol::request_key&)>& match,
                           const protocol::error& why) {
  std::vector<protocol::token_update> updates;
  for (size_t i = running_.size(); i-- > 0;)
    if (match(running_[i]->key)) {
      updates.push_back(protocol::final_update(running_[i]->key, why));
      leave(i);
    }
  return updates;
}

std::vector<protocol::token_update> decode_batch::fail_all(const protocol::error& why) {
  return remove_where([](const protocol::request_key&) { return true; }, why);
}

} // namespace supernode::services
