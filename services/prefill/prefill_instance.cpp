#include "services/prefill/prefill_instance.hpp"

#include "services/protocol/ems_messages.hpp"
#include "services/serving/delivery.hpp"
#include "services/serving/kv_shipping.hpp"

#include <algorithm>

namespace supernode::services {

prefill_instance::prefill_instance(std::shared_ptr<const model::model_weights> weights,
                                   const serving_config& config,
                                   std::optional<ep_membership> membership)
    : config_(config), model_(weights),
      pool_(model_.kv_layout(config.block_size, config.kv_with_mtp()),
            config.prefill_pool_blocks()),
      engine_(model_, config.prefill_token_budget, config.kv_with_mtp()) {
  protocol::register_serving_messages();
  if (membership) {
    group_ = std::make_unique<ep_rank>(weights, std::move(*membership));
    model_.set_routed_experts(group_.get());
  }
}

prefill_instance::~prefill_instance() {
  stop();
}

void prefill_instance::start(transport::endpoint& out) {
  if (group_) group_->watch(out);
  out_ = &out;
  if (config_.ems.context_cache)
    cache_ = std::make_unique<ems::context_cache_client>(out, config_.ems,
                                                         config_.cache_model_key(), pool_.layout());
  auto has_work = [this] { return !queue_.empty() || !active_.empty() || !cancelled_.empty(); };
  if (group_)
    worker_.start_in_group(*group_, has_work, [this] { compute_round(); });
  else
    worker_.start(has_work, [this] { compute_round(); });
}

void prefill_instance::stop() {
  worker_.stop();
}

void prefill_instance::on(const transport::peer_id& from, const protocol::prefill_request& r,
                          transport::endpoint& out) {
  // The asker receives the prompt's KV: only a decode instance may ask.
  if (!out.expect_role(from, "decode", "prefill_request")) return;
  auto q = std::make_unique<queued>();
  q->decode = from;
  q->job.key = r.key;
  q->job.spec = r.spec;
  protocol::error refusal;
  if (q->job.spec.prompt.empty())
    refusal = {protocol::serving_errc::invalid_request, "empty prompt"};
  if (group_ && group_->broken())
    refusal = {protocol::ep_errc::group_broken, group_->broken_reason()};
  if (!refusal.ok()) {
    out.send("control", from, transport::make_envelope(protocol::prefill_failed{r.key, refusal}));
    return;
  }
  tokens_accepted_ += static_cast<int64_t>(q->job.spec.prompt.size());
  {
    std::lock_guard lock(worker_.mutex());
    queue_.push_back(std::move(q));
  }
  ++waiting_;
  worker_.notify();
}

void prefill_instance::drain(drain_mode) {
  // A prompt's KV is short work and moves by itself (to its decode instance): either mode lets
  // the prompts here finish. Prompts placed before the scheduler heard of the drain are taken.
  draining_ = true;
}

bool prefill_instance::drained() const {
  // Every accepted prompt ends by counting its tokens completed (shipped, failed or dropped).
  return draining_ && tokens_completed_.load() == tokens_accepted_.load();
}

void prefill_instance::on(const transport::peer_id& from, const protocol::cancel_request& c,
                          transport::endpoint& out) {
  if (from != c.key.gateway && !out.expect_role(from, "scheduler", "cancel_request")) return;
  std::lock_guard lock(worker_.mutex());
  cancelled_.insert(c.key);
  worker_.notify();
}

void prefill_instance::on(const transport::peer_id& from, const protocol::ems_ring_view& v,
                          transport::endpoint& out) {
  if (!out.expect_role(from, "mp_controller", "ems_ring_view")) return;
  if (cache_) cache_->on_ring_view(v);
}

void prefill_instance::on_tick(transport::endpoint& out) {
  protocol::load_report r;
  r.role = "prefill";
  r.prompt_tokens_completed = tokens_completed_.load();
  r.running = running_.load();
  r.waiting = waiting_.load();
  if (draining_) r.unavailable = {protocol::serving_errc::shutting_down, "draining"};
  if (group_) group_->add_to(r);
  if (cache_) r.cache = cache_->stats();
  send_load_report(out, std::move(r));
}

void prefill_instance::on_member_event(const transport::membership_event& event,
                                       transport::endpoint& out) {
  (void)out;
  if (group_) group_->on_member_event(event);
}

void prefill_instance::fail_everything(const protocol::error& why) {
  std::deque<std::unique_ptr<queued>> all;
  {
    std::lock_guard lock(worker_.mutex());
    all.swap(queue_);
    waiting_ = 0;
  }
  for (auto& q : active_) all.push_back(std::move(q));
  active_.clear();
  for (auto& q : all) {
    if (out_)
      send_with_backoff(*out_, "control", q->decode,
                        transport::make_envelope(protocol::prefill_failed{q->job.key, why}));
    finish(*q);
  }
  running_ = 0;
}

void prefill_instance::finish(queued& q) {
  q.table.release(pool_);
  tokens_completed_ += static_cast<int64_t>(q.job.spec.prompt.size());
}

void prefill_instance::admit_queued() {
  std::lock_guard lock(worker_.mutex());
  while (!queue_.empty()) {
    auto& q = *queue_.front();
    const auto prompt = static_cast<int64_t>(q.job.spec.prompt.size());
    if (pool_.layout().blocks_for(prompt) > pool_.num_blocks()) {
      // Could never fit: say so rather than wait forever.
      out_->send(
          "control", q.decode,
          transport::make_envelope(protocol::prefill_failed{
              q.job.key,
              {protocol::serving_errc::kv_capacity_exceeded,
               "prompt of " + std::to_string(prompt) + " tokens exceeds the prefill KV pool"}}));
      tokens_completed_ += prompt;
      --waiting_;
      queue_.pop_front();
      continue;
    }
    try {
      q.table.reserve(pool_, prompt);
    } catch (const model::kv_cache_full&) {
      break; // waits for running prompts to ship and free their blocks
    }
    q.job.table = &q.table;
    active_.push_back(std::move(queue_.front()));
    queue_.pop_front();
    --waiting_;
  }
}

void prefill_instance::drop_cancelled() {
  std::set<protocol::request_key> cancelled;
  {
    std::lock_guard lock(worker_.mutex());
    cancelled.swap(cancelled_);
    for (auto it = queue_.begin(); it != queue_.end();)
      if (cancelled.count((*it)->job.key)) {
        tokens_completed_ += static_cast<int64_t>((*it)->job.spec.prompt.size());
        --waiting_;
        it = queue_.erase(it);
      } else {
        ++it;
      }
  }
  for (auto it = active_.begin(); it != active_.end();)
    if (cancelled.count((*it)->job.key)) {
      finish(**it);
      it = active_.erase(it);
    } else {
      ++it;
    }
}

void prefill_instance::ship(queued& q, const prefill_output& done) {
  const kv_shipment what{q.job.key, done.first_token,
                         static_cast<int64_t>(q.job.spec.prompt.size()), 0, &done.mtp};
  const auto status = ship_kv(*out_, q.decode, what, q.table.blocks(), pool_);
  if (status != transport::send_status::ok)
    out_->send("control", q.decode,
               transport::make_envelope(protocol::prefill_failed{
                   q.job.key,
                   {protocol::errc_of(status),
                    std::string("KV transfer failed: ") + transport::to_string(status)}}));
}

void prefill_instance::load_cached_prefixes() {
  if (!cache_) return;
  for (auto& q : active_) {
    if (q->cached) continue;
    q->cached = cache_->load_prefix(q->job.spec.prompt, q->table, pool_);
    const int64_t hit = q->cached->hit_tokens(cache_->block_tokens());
    q->job.done = hit;
    q->table.set_tokens(hit);
  }
}

void prefill_instance::store_new_blocks(queued& q) {
  if (cache_ && q.cached)
    cache_->store_async(q.job.spec.prompt, q.cached->hit_blocks, q.table, pool_);
}

void prefill_instance::compute_round() {
  drop_cancelled();
  if (group_ && group_->broken())
    return fail_everything({protocol::ep_errc::group_broken, group_->broken_reason()});
  admit_queued();
  load_cached_prefixes();
  running_ = static_cast<int64_t>(active_.size());
  if (active_.empty()) return;
  std::vector<prefill_job*> jobs;
  for (auto& q : active_) jobs.push_back(&q->job);
  std::vector<prefill_output> done_jobs;
  try {
    done_jobs = engine_.step(jobs, pool_);
  } catch (const ep_failure& e) {
    return fail_everything({protocol::ep_errc::group_broken, e.what()});
  }
  for (auto& done : done_jobs) {
    auto it =
        std::find_if(active_.begin(), active_.end(), [&](auto& q) { return &q->job == done.job; });
    ship(**it, done);
    store_new_blocks(**it); // after shipping: storing never delays the first token
    finish(**it);
    active_.erase(it);
  }
  running_ = static_cast<int64_t>(active_.size());
}

} // namespace supernode::services
