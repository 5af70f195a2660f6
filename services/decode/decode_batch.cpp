#include "services/decode/decode_batch.hpp"

#include "kernels/sampling.hpp"
#include "model/engine.hpp"

namespace supernode::services {

decode_batch::decode_batch(model::transformer& model, model::kv_block_pool& pool,
                           release_fn release)
    : model_(model), pool_(pool), release_(std::move(release)) {}

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
  if (accept(*s, first_token, u)) {
    release_(*s);
    return u;
  }
  running_.push_back(std::move(s));
  return u;
}

void decode_batch::leave(size_t index) {
  release_(*running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
}

std::vector<protocol::token_update> decode_batch::step() {
  std::vector<protocol::token_update> updates;
  if (running_.empty()) return updates;
  tokens_.clear();
  steps_.clear();
  for (auto& s : running_) {
    const int64_t pos = s->table.tokens();
    tokens_.push_back(s->generated.back());
    steps_.push_back({&s->table, pos, 1, model::attention_mode::decode});
    s->table.set_tokens(pos + 1);
  }
  if (forward_)
    forward_(tokens_, steps_, pool_, hidden_);
  else
    model_.forward(tokens_, steps_, pool_, hidden_);
  model_.logits(hidden_.data(), static_cast<int64_t>(running_.size()), logits_);
  const int64_t vocab = model_.config().vocab_size;
  std::vector<size_t> finished;
  for (size_t i = 0; i < running_.size(); ++i) {
    auto& s = *running_[i];
    const kernels::sampling_params params{s.spec.temperature, s.spec.top_p, s.spec.top_k,
                                          s.spec.seed};
    const int32_t token =
        kernels::sample(std::span(logits_.data() + i * vocab, vocab), params, s.generated.size());
    protocol::token_update u;
    u.key = s.key;
    if (accept(s, token, u)) finished.push_back(i);
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
