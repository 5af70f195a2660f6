#include "services/decode/decode_instance.hpp"

#include "services/decode/decode_kv_mirror.hpp"
#include "services/protocol/ems_messages.hpp"
#include "services/serving/delivery.hpp"
#include "services/serving/kv_checksum.hpp"
#include "services/serving/kv_shipping.hpp"

#include <map>

namespace supernode::services {

using protocol::request_key;
using protocol::token_update;

decode_instance::decode_instance(std::shared_ptr<const model::model_weights> weights,
                                 const serving_config& config,
                                 std::optional<ep_membership> membership)
    : config_(config), model_(weights),
      pool_(model_.kv_layout(config.block_size, config.kv_with_mtp()), config.decode_kv_blocks),
      batch_(model_, pool_, [this](decode_sequence& s) { leave_batch(s); }),
      prefill_(model_, config.prefill_token_budget, config.kv_with_mtp()) {
  protocol::register_serving_messages();
  protocol::register_ems_messages(); // ring views reach every pool client, mirroring or not
  batch_.set_mtp(config.decode_mtp_drafts, config.decode_mtp_adaptive, config.decode_mtp_sampling);
  if (config.decode_mtp_drafts > 0)
    batch_.set_draft_vocabulary(config.decode_mtp_draft_vocab, config.decode_mtp_draft_vocab_file);
  if (membership) {
    group_ = std::make_unique<ep_rank>(weights, std::move(*membership));
    model_.set_routed_experts(group_.get());
    batch_.set_row_budget(group_->membership().options.local_batch);
    if (group_->membership().options.microbatches == 2) {
      microbatches_ = std::make_unique<microbatch_pipeline>(weights, *group_);
      batch_.set_forward([this](auto tokens, auto steps, auto& pool, auto& hidden) {
        microbatches_->forward(tokens, steps, pool, hidden);
      });
    }
  }
}

decode_instance::~decode_instance() {
  stop();
}

void decode_instance::start(transport::endpoint& out) {
  out_ = &out;
  if (group_) group_->watch(out);
  using ems::decode_kv_store;
  if (config_.ems.store_decode_kv != decode_kv_store::off)
    cache_ = std::make_unique<ems::context_cache_client>(out, config_.ems,
                                                         config_.cache_model_key(), pool_.layout());
  if (config_.ems.store_decode_kv == decode_kv_store::incremental)
    batch_.set_after_forward([this](decode_sequence& s) { mirror(s); });
  auto at_exit = [this] {
    send_updates(
        batch_.fail_all({protocol::serving_errc::shutting_down, "decode instance stopping"}));
  };
  if (group_)
    worker_.start_in_group(
        *group_, [this] { return has_work(); }, [this] { compute_round(); }, at_exit);
  else
    worker_.start([this] { return has_work(); }, [this] { compute_round(); }, at_exit);
}

void decode_instance::stop() {
  worker_.stop();
}

int64_t decode_instance::free_kv_blocks() const {
  std::lock_guard lock(pool_mutex_);
  return pool_.free_blocks();
}

void decode_instance::return_blocks(decode_sequence& s) {
  const auto n = static_cast<int64_t>(s.table.blocks().size());
  // Counted under the pool's lock, so a load report reads released and used blocks at one
  // instant (a new scheduler's baseline is their sum).
  std::lock_guard lock(pool_mutex_);
  s.table.release(pool_);
  blocks_released_ += n;
}

void decode_instance::release(decode_sequence& s) {
  return_blocks(s);
  std::lock_guard lock(worker_.mutex());
  finished_.push_back(s.key);
}

void decode_instance::mirror(decode_sequence& s) {
  try {
    mirror_full_blocks(s, *cache_, pool_);
  } catch (const std::exception& e) {
    // A block not mirrored costs a resume recomputing it, never the request.
    out_->log().warn("decode KV of {} not stored: {}", s.key.str(), e.what());
  }
}

void decode_instance::leave_batch(decode_sequence& s) {
  if (cache_) mirror(s);
  release(s);
}

void decode_instance::send_updates(std::vector<token_update> updates) {
  if (updates.empty() || !out_) return;
  std::map<std::string, protocol::token_batch> by_gateway;
  for (auto& u : updates) by_gateway[u.key.gateway].updates.push_back(std::move(u));
  for (auto& [gateway, batch] : by_gateway) {
    const auto status =
        send_with_backoff(*out_, "control", gateway, transport::make_envelope(std::move(batch)));
    if (status != transport::send_status::ok)
      out_->log().warn("tokens for {} lost: {}", gateway, transport::to_string(status));
  }
}

void decode_instance::end_unbatched(std::unique_ptr<decode_sequence> s, protocol::error why) {
  release(*s);
  send_updates({protocol::final_update(s->key, std::move(why))});
}

bool decode_instance::from_asked_prefill(const transport::peer_id& from,
                                         const protocol::request_key& key, const char* what,
                                         transport::endpoint& out) {
  auto it = awaiting_.find(key);
  if (it == awaiting_.end()) {
    // A late message of a request cancelled meanwhile is normal from a prefill instance, or a
    // draining decode instance a sequence moved from, only.
    if (const auto role = out.role_of(from); role != "prefill" && role != "decode")
      out.reject(from, "not_from_prefill", std::string(what) + " from a non-prefill instance");
    return false;
  }
  if (it->second.seq->prefill == from) return true;
  out.reject(from, "not_from_asked_prefill",
             std::string(what) + " for a request asked of " + it->second.seq->prefill);
  return false;
}

void decode_instance::on(const transport::peer_id& from, const protocol::prefill_failed& f,
                         transport::endpoint& out) {
  if (!from_asked_prefill(from, f.key, "prefill_failed", out)) return;
  cancel(f.key, {f.why.code, "prefill on " + from + " failed: " + f.why.message});
}

void decode_instance::on(const transport::peer_id& from, const protocol::cancel_request& c,
                         transport::endpoint& out) {
  if (from != c.key.gateway && !out.expect_role(from, "scheduler", "cancel_request")) return;
  cancel(c.key, c.why);
}

void decode_instance::on(const transport::peer_id& from, const protocol::ems_ring_view& v,
                         transport::endpoint& out) {
  if (!out.expect_role(from, "mp_controller", "ems_ring_view")) return;
  if (cache_) cache_->on_ring_view(v);
}

void decode_instance::on(const transport::peer_id& scheduler, const protocol::decode_assign& a,
                         transport::endpoint& out) {
  if (!out.expect_role(scheduler, "scheduler", "decode_assign")) return;
  protocol::decode_assign_result result;
  result.key = a.key;
  auto seq = std::make_unique<decode_sequence>();
  seq->key = a.key;
  seq->spec = a.spec;
  seq->prefill = a.prefill;
  using protocol::serving_errc;
  if (a.spec.prompt.empty() || a.spec.max_tokens < 1)
    result.refusal = {serving_errc::invalid_request, "empty prompt or max_tokens below 1"};
  else if (awaiting_.count(a.key))
    result.refusal = {serving_errc::duplicate_request, "request assigned twice"};
  else if (group_ && group_->broken())
    result.refusal = {protocol::ep_errc::group_broken, group_->broken_reason()};
  else if (draining())
    result.refusal = {serving_errc::shutting_down, "decode instance draining"};
  else if (!a.moved.empty() && (a.spec.generated.empty() || a.prefill != a.moved.instance))
    result.refusal = {serving_errc::invalid_request,
                      "a moving sequence comes with its generated tokens, from its holder"};
  else
    try {
      std::lock_guard lock(pool_mutex_);
      seq->table.reserve(pool_, static_cast<int64_t>(a.spec.prompt.size()) + a.spec.max_tokens);
    } catch (const std::exception& e) {
      result.refusal = {serving_errc::kv_exhausted, e.what()};
    }
  out.send("control", scheduler, transport::make_envelope(result));
  if (!result.accepted()) return;

  if (a.prefill.empty()) {
    {
      std::lock_guard lock(worker_.mutex());
      to_prefill_.push_back(std::move(seq));
    }
    ++waiting_;
    worker_.notify();
    return;
  }
  const auto status = out.send_retrying(
      "control", a.prefill,
      transport::make_envelope(protocol::prefill_request{a.key, a.spec, a.moved}));
  if (status != transport::send_status::ok) {
    end_unbatched(std::move(seq),
                  {protocol::errc_of(status), "cannot reach prefill instance " + a.prefill + ": " +
                                                  transport::to_string(status)});
    return;
  }
  auto& w = awaiting_[a.key];
  // A moving sequence's KV covers its generated tokens too, all but the last (sampled, never
  // fed): its first step feeds only that one.
  const auto generated_kv =
      a.moved.empty() ? int64_t{0} : static_cast<int64_t>(a.spec.generated.size()) - 1;
  seq->loaded_generated = generated_kv;
  w.received.assign(
      pool_.layout().blocks_for(static_cast<int64_t>(a.spec.prompt.size()) + generated_kv), false);
  w.moved = a.moved;
  w.seq = std::move(seq);
  ++waiting_;
}

void decode_instance::on(const transport::peer_id& from,
                         std::shared_ptr<const protocol::kv_transfer> run,
                         transport::endpoint& out) {
  const auto& kv = *run;
  // Cancelled meanwhile (its blocks are already free), or from a prefill instance not asked.
  if (!from_asked_prefill(from, kv.key, "kv_transfer", out)) return;
  auto it = awaiting_.find(kv.key);
  auto& w = it->second;
  const auto& layout = pool_.layout();
  const auto prompt = static_cast<int64_t>(w.seq->spec.prompt.size());
  std::string bad;
  if (kv.block_floats != layout.block_floats())
    bad = "block shape differs (" + std::to_string(kv.block_floats) + " floats, expected " +
          std::to_string(layout.block_floats()) + ")";
  else if (kv.prompt_tokens != prompt || kv.generated_tokens != w.seq->loaded_generated ||
           kv.total_blocks != static_cast<int64_t>(w.received.size()))
    bad = "prompt length, generated tokens or block count differ from the request";
  else if (kv.first_block < 0 || kv.block_count < 1 ||
           kv.first_block + kv.block_count > kv.total_blocks)
    bad = "block range outside the prompt";
  else if (kv.data.size() != static_cast<size_t>(kv.block_count) * layout.block_bytes())
    bad = "payload size does not match its block count";
  else if (kv.mtp_hidden.size() !=
           kv.mtp_following.size() * static_cast<size_t>(model_.config().hidden_size))
    bad = "MTP rows do not match the model's hidden size";
  // Damaged on the way (a plane without integrity checks): retryable, the gateway places the
  // request again; a layout that disagrees is not.
  const bool damaged = bad.empty() && kv.checksum != kv_transfer_checksum(kv);
  if (damaged) bad = "its checksum differs: damaged on the way";
  if (!bad.empty()) {
    auto seq = std::move(w.seq);
    awaiting_.erase(it);
    --waiting_;
    end_unbatched(std::move(seq), {damaged ? protocol::serving_errc::delivery_failed
                                           : protocol::serving_errc::kv_layout_mismatch,
                                   "bad KV transfer: " + bad});
    return;
  }
  bool fresh = false;
  for (int64_t b = kv.first_block; b < kv.first_block + kv.block_count; ++b)
    if (!w.received[b]) {
      w.received[b] = true;
      ++w.blocks_received;
      fresh = true;
    }
  if (fresh && !kv.mtp_following.empty())
    w.seq->mtp = model::mtp_state_of_rows(kv.mtp_first_position, kv.mtp_following, kv.mtp_hidden,
                                          model_.config().hidden_size);
  if (fresh) w.seq->kv_runs.push_back(std::move(run)); // a repeated run brings nothing new
  if (w.blocks_received < static_cast<int64_t>(w.received.size())) return;
  // The holder of a moving sequence may let its KV go now.
  if (!w.moved.empty()) {
    out.send("control", from, transport::make_envelope(protocol::moved_kv_received{w.moved.key}));
    ++moved_in_;
  }
  auto seq = std::move(w.seq);
  awaiting_.erase(it);
  {
    std::lock_guard lock(worker_.mutex());
    ready_.emplace_back(std::move(seq), kv.first_token);
  }
  worker_.notify();
}

void decode_instance::on(const transport::peer_id& from, const protocol::prefill_request& m,
                         transport::endpoint& out) {
  if (!out.expect_role(from, "decode", "prefill_request")) return;
  {
    std::lock_guard lock(worker_.mutex());
    fetches_.emplace_back(from, m);
  }
  worker_.notify();
}

void decode_instance::on(const transport::peer_id& from, const protocol::moved_kv_received& m,
                         transport::endpoint& out) {
  if (!out.expect_role(from, "decode", "moved_kv_received")) return;
  std::lock_guard lock(worker_.mutex());
  auto it = moving_.find(m.key);
  if (it == moving_.end()) return; // let go already (held too long)
  if (it->second.fetcher != from)
    return out.reject(from, "not_from_fetcher",
                      "moved_kv_received for " + m.key.str() + " fetched by another instance");
  ++moved_out_;
  forget_moving(it);
}

void decode_instance::forget_moving(std::map<request_key, moving_sequence>::iterator it) {
  if (it->second.shipping) {
    it->second.forget_when_shipped = true;
    return;
  }
  auto seq = std::move(it->second.seq);
  moving_.erase(it);
  --moving_count_;
  return_blocks(*seq); // not release(): it takes worker_.mutex(), held here
  finished_.push_back(seq->key);
}

void decode_instance::drain(drain_mode mode) {
  drain_ = static_cast<int>(mode);
  worker_.notify();
}

bool decode_instance::drained() const {
  return draining() && waiting_ == 0 && running_ == 0 && moving_count_ == 0;
}

void decode_instance::cancel(const request_key& key, protocol::error why) {
  if (auto it = awaiting_.find(key); it != awaiting_.end()) {
    auto seq = std::move(it->second.seq);
    awaiting_.erase(it);
    --waiting_;
    end_unbatched(std::move(seq), std::move(why));
    return;
  }
  {
    std::lock_guard lock(worker_.mutex());
    cancels_.push_back({key, std::move(why)});
  }
  worker_.notify();
}

void decode_instance::on(const transport::peer_id& from, const protocol::decode_batch_cap& m,
                         transport::endpoint& out) {
  if (!out.expect_role(from, "gateway", "decode_batch_cap")) return;
  batch_cap_ = m.cap;
  worker_.notify(); // a raised cap seats waiting sequences at the next round
}

void decode_instance::on_member_event(const transport::membership_event& event,
                                      transport::endpoint& out) {
  if (group_) group_->on_member_event(event); // a member back: the group grows again
  if (event.what == transport::membership_event::kind::joined) return;
  // A prefill instance gone: the requests waiting on its KV can no longer start.
  std::vector<request_key> lost;
  for (auto& [key, w] : awaiting_)
    if (w.seq->prefill == event.peer || key.gateway == event.peer) lost.push_back(key);
  for (auto& key : lost)
    cancel(key,
           {protocol::serving_errc::instance_down, event.peer + " is down (" + event.reason + ")"});
  {
    // A moving sequence whose fetcher (or gateway) went: its request recomputes elsewhere.
    std::lock_guard lock(worker_.mutex());
    for (auto it = moving_.begin(); it != moving_.end();) {
      auto next = std::next(it);
      if (it->second.fetcher == event.peer || it->first.gateway == event.peer) forget_moving(it);
      it = next;
    }
  }
  // A gateway gone: nobody reads its streams any more.
  bool gateway_lost = false;
  for (auto& g : instances_with_role(out.cluster(), "gateway")) gateway_lost |= g == event.peer;
  if (gateway_lost) {
    std::lock_guard lock(worker_.mutex());
    cancels_.push_back(
        {request_key{event.peer, 0}, {protocol::serving_errc::cancelled, "gateway down"}});
  }
  worker_.notify();
}

void decode_instance::on_tick(transport::endpoint& out) {
  protocol::load_report r;
  r.role = "decode";
  r.kv_blocks_total = pool_.num_blocks();
  {
    std::lock_guard lock(pool_mutex_);
    r.kv_blocks_released = blocks_released_.load();
    r.kv_blocks_used = r.kv_blocks_total - pool_.free_blocks();
  }
  r.running = running_.load();
  r.waiting = waiting_.load();
  r.sequences_moved_in = moved_in_;
  r.sequences_moved_out = moved_out_;
  r.mtp_drafted = mtp_drafted_.load();
  r.mtp_accepted = mtp_accepted_.load();
  r.mtp_drafting_steps = mtp_drafting_steps_.load();
  r.mtp_depth = mtp_depth_.load();
  if (draining())
    r.unavailable = {protocol::serving_errc::shutting_down,
                     std::string("draining (") + to_string(static_cast<drain_mode>(drain_.load())) +
                         ")"};
  if (group_) group_->add_to(r);
  if (cache_) r.cache = cache_->stats();
  {
    std::lock_guard lock(worker_.mutex());
    const auto now = std::chrono::steady_clock::now();
    for (auto it = moving_.begin(); it != moving_.end();) {
      auto next = std::next(it);
      // One fetched waits for its fetcher's word (or end) instead.
      if (it->second.fetcher.empty() && now - it->second.since > moved_kv_hold) {
        out.log().warn("moving {}: nobody fetched its KV in {} s; its request recomputes it",
                       it->first.str(), moved_kv_hold.count());
        forget_moving(it);
      }
      it = next;
    }
    r.finished.swap(finished_);
  }
  send_load_report(out, std::move(r));
}

// ---- compute thread --------------------------------------------------------------------------

namespace {
// Moves the sequences of `queue` whose key matches into `out`, keeping the others in order.
template<class Queue, class Seq, class Match>
void take_matching(Queue& queue, Seq seq_of, const Match& match,
                   std::vector<std::unique_ptr<decode_sequence>>& out) {
  for (auto it = queue.begin(); it != queue.end();)
    if (match(seq_of(*it)->key)) {
      out.push_back(std::move(seq_of(*it)));
      it = queue.erase(it);
    } else {
      ++it;
    }
}
} // namespace

void decode_instance::apply_cancels(std::vector<token_update>& updates) {
  std::vector<pending_cancel> cancels;
  {
    std::lock_guard lock(worker_.mutex());
    cancels.swap(cancels_);
  }
  for (auto& c : cancels) {
    // id 0 names no request: it stands for every request of that gateway.
    auto matches = [&](const request_key& k) {
      return c.key.id == 0 ? k.gateway == c.key.gateway : k == c.key;
    };
    for (auto& u : batch_.remove_where(matches, c.why)) updates.push_back(std::move(u));
    // Queued (KV arrived, or waiting for a local prefill): they never joined the batch.
    std::vector<std::unique_ptr<decode_sequence>> dropped;
    {
      std::lock_guard lock(worker_.mutex());
      take_matching(
          ready_, [](auto& e) -> auto& { return e.first; }, matches, dropped);
      take_matching(
          to_prefill_, [](auto& e) -> auto& { return e; }, matches, dropped);
    }
    take_matching(
        prefilling_, [](auto& e) -> auto& { return e.seq; }, matches, dropped);
    for (auto& s : dropped) {
      --waiting_;
      release(*s);
      updates.push_back(protocol::final_update(s->key, c.why));
    }
  }
}

void decode_instance::import_kv(decode_sequence& s) {
  const auto& layout = pool_.layout();
  const auto& blocks = s.table.blocks();
  for (auto& run : s.kv_runs)
    for (int64_t i = 0; i < run->block_count; ++i)
      pool_.import_block_bytes(
          blocks[run->first_block + i],
          run->data.bytes().subspan(i * layout.block_bytes(), layout.block_bytes()));
  s.kv_runs.clear(); // the frames they referenced go now
}

void decode_instance::prefill_locally() {
  {
    std::lock_guard lock(worker_.mutex());
    while (!to_prefill_.empty()) {
      local_prefill p;
      p.seq = std::move(to_prefill_.front());
      to_prefill_.pop_front();
      prefilling_.push_back(std::move(p));
    }
  }
  if (prefilling_.empty()) return;
  std::vector<prefill_job*> jobs;
  for (auto& p : prefilling_) {
    p.job.key = p.seq->key;
    if (p.job.spec.prompt.empty()) p.job.spec = p.seq->spec;
    p.job.table = &p.seq->table;
    jobs.push_back(&p.job);
  }
  for (auto& done : prefill_.step(jobs, pool_)) {
    for (auto it = prefilling_.begin(); it != prefilling_.end(); ++it)
      if (&it->job == done.job) {
        auto seq = std::move(it->seq);
        seq->mtp = std::move(done.mtp);
        prefilling_.erase(it);
        std::lock_guard lock(worker_.mutex());
        ready_.emplace_back(std::move(seq), done.first_token);
        break;
      }
  }
}

bool decode_instance::has_work() const {
  return !ready_.empty() || !to_prefill_.empty() || !cancels_.empty() || !batch_.empty() ||
         !prefilling_.empty() || !fetches_.empty();
}

void decode_instance::move_out(std::vector<token_update>& updates) {
  if (drain_.load() != static_cast<int>(drain_mode::migrate)) return;
  auto movable = batch_.detach_movable();
  if (movable.empty()) return;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(worker_.mutex());
  for (auto& s : movable) {
    // After its tokens: the gateway places it again, naming this instance as its KV's holder.
    updates.push_back(protocol::final_update(
        s->key, {protocol::serving_errc::sequence_moved,
                 "decode instance draining: the sequence moves on with its KV"}));
    const auto key = s->key;
    moving_[key] = moving_sequence{std::move(s), now, {}};
    ++moving_count_;
  }
}

void decode_instance::ship_fetched() {
  std::deque<std::pair<transport::peer_id, protocol::prefill_request>> fetches;
  {
    std::lock_guard lock(worker_.mutex());
    fetches.swap(fetches_);
  }
  for (auto& [from, m] : fetches) {
    decode_sequence* seq = nullptr;
    std::string refusal;
    {
      std::lock_guard lock(worker_.mutex());
      auto it = moving_.find(m.moved.key);
      if (it == moving_.end())
        refusal = "no sequence " + m.moved.key.str() + " moves off " + out_->self();
      else if (!it->second.fetcher.empty() && it->second.fetcher != from)
        refusal = m.moved.key.str() + " was fetched by " + it->second.fetcher;
      else if (it->second.seq->generated != m.spec.generated)
        refusal = "the request's streamed tokens differ from what " + m.moved.key.str() +
                  " generated here";
      else {
        it->second.fetcher = from;
        it->second.shipping = true;
        seq = it->second.seq.get(); // stays until moved_kv_received or the fetcher's end
      }
    }
    auto status = transport::send_status::ok;
    if (seq) {
      const auto generated_kv = static_cast<int64_t>(seq->generated.size()) - 1;
      const auto prompt = static_cast<int64_t>(seq->spec.prompt.size());
      const auto& blocks = seq->table.blocks();
      const auto count = pool_.layout().blocks_for(prompt + generated_kv);
      const kv_shipment what{m.key, seq->generated.front(), prompt, generated_kv, &seq->mtp};
      status =
          ship_kv(*out_, from, what, std::span(blocks).first(static_cast<size_t>(count)), pool_);
      if (status != transport::send_status::ok)
        refusal = std::string("KV transfer failed: ") + transport::to_string(status);
      std::lock_guard lock(worker_.mutex());
      auto it = moving_.find(m.moved.key);
      it->second.shipping = false;
      if (it->second.forget_when_shipped) forget_moving(it);
    }
    if (!refusal.empty())
      out_->send(
          "control", from,
          transport::make_envelope(protocol::prefill_failed{
              m.key, seq ? protocol::error{protocol::errc_of(status), refusal}
                         : protocol::error{protocol::serving_errc::instance_down, refusal}}));
  }
}

void decode_instance::fail_everything(const protocol::error& why,
                                      std::vector<token_update>& updates) {
  for (auto& u : batch_.fail_all(why)) updates.push_back(std::move(u));
  std::deque<std::pair<std::unique_ptr<decode_sequence>, int32_t>> ready;
  {
    std::lock_guard lock(worker_.mutex());
    ready.swap(ready_);
  }
  for (auto& [s, first] : ready) {
    --waiting_;
    release(*s);
    updates.push_back(protocol::final_update(s->key, why));
  }
  running_ = 0;
}

void decode_instance::compute_round() {
  std::vector<token_update> updates;
  apply_cancels(updates);
  ship_fetched();
  if (group_ && group_->broken()) {
    fail_everything({protocol::ep_errc::group_broken, group_->broken_reason()}, updates);
    return send_updates(std::move(updates));
  }
  prefill_locally();
  // Join what is ready, up to the batch limit; the rest waits for seats.
  for (;;) {
    std::pair<std::unique_ptr<decode_sequence>, int32_t> next;
    {
      std::lock_guard lock(worker_.mutex());
      if (ready_.empty() || static_cast<int64_t>(batch_.size()) >=
                                batch_seats(batch_cap_.load(), config_.decode_max_batch))
        break;
      next = std::move(ready_.front());
      ready_.pop_front();
    }
    --waiting_;
    import_kv(*next.first);
    // A resumed request: the generated span's KV its first instance mirrored, when the pool
    // has it, so the step recomputes only what follows. The lookup waits on the pool here,
    // between steps; resumes follow failures only, and save a step over the whole span.
    if (cache_ && !next.first->spec.generated.empty() && next.first->loaded_generated == 0)
      load_mirrored_kv(*next.first, *cache_, pool_);
    updates.push_back(batch_.join(std::move(next.first), next.second));
  }
  running_ = static_cast<int64_t>(batch_.size());
  try {
    if (!batch_.empty())
      for (auto& u : batch_.step()) updates.push_back(std::move(u));
  } catch (const ep_failure& e) {
    // The group re-forms over the members alive (ep_rank::form, before the next round) and
    // the step runs again: the sequences and their KV stay here. If it cannot re-form, the
    // next round finds the group broken and ends them (their gateways place them again).
    out_->log().warn("decode step of {} sequences paused: {}", batch_.size(), e.what());
  } catch (const std::exception& e) {
    // A bug, not a fault of the cluster: the step's sequences end with an internal error (their
    // KV released) instead of the process aborting and taking every other sequence with it.
    out_->log().error("decode step of {} sequences failed: {}", batch_.size(), e.what());
    for (auto& u : batch_.fail_all(
             {protocol::serving_errc::internal, std::string("decode step failed: ") + e.what()}))
      updates.push_back(std::move(u));
  }
  mtp_drafted_ = batch_.drafted_tokens();
  mtp_accepted_ = batch_.accepted_tokens();
  mtp_drafting_steps_ = batch_.drafting_steps();
  mtp_depth_ = batch_.last_depth();
  move_out(updates);
  send_updates(std::move(updates));
  // After the updates are sent: a drain that sees nothing running must not cut them off.
  running_ = static_cast<int64_t>(batch_.size());
}

} // namespace supernode::services
