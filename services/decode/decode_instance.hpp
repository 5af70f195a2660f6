#pragma once
// A decode instance (§4.1): continuous batching on its own compute thread, fed by the actor
// thread, which plays the paper's background role — it reserves KV blocks for each assigned
// request, routes the prompt to the chosen prefill instance, receives the KV over the bulk flow
// straight into the reserved blocks, and only then hands the request to the batch. So the
// decode loop never waits on a prefill. With no prefill instance named (colocated shape) the
// compute thread prefills the prompt itself between decode steps.

#include "model/kv_cache.hpp"
#include "model/transformer.hpp"
#include "services/decode/decode_batch.hpp"
#include "services/decode/decode_interface.hpp"
#include "services/ems/context_cache_client.hpp"
#include "services/moe/ep_rank.hpp"
#include "services/moe/microbatch_pipeline.hpp"
#include "services/prefill/prefill_engine.hpp"
#include "services/role_logic.hpp"
#include "services/serving/compute_worker.hpp"
#include "services/serving/serving_config.hpp"

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

namespace supernode::services {

class decode_instance : public role_logic {
public:
  // With a membership, this instance is one rank of an expert-parallel decode instance.
  decode_instance(std::shared_ptr<const model::model_weights> weights, const serving_config& config,
                  std::optional<ep_membership> membership = {});
  ~decode_instance() override;

  using interface = decode_interface;
  void start(transport::endpoint& out) override;
  void stop() override;
  void on(const transport::peer_id& scheduler, const protocol::decode_assign& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, std::shared_ptr<const protocol::kv_transfer> m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::prefill_failed& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::cancel_request& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::ems_ring_view& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::decode_batch_cap& m,
          transport::endpoint& out);
  // From the decode instance a moving sequence was placed on: send it the sequence's KV.
  void on(const transport::peer_id& from, const protocol::prefill_request& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::moved_kv_received& m,
          transport::endpoint& out);
  // finish: takes no new request and lets the running ones end. migrate: also takes each
  // running sequence out of the batch at a step boundary, tells its gateway it moves
  // (sequence_moved), and keeps its KV until the instance it is placed on has fetched it.
  void drain(drain_mode mode) override;
  bool drained() const override;
  // How long a moving sequence's KV waits here for the instance it is placed on.
  static constexpr auto moved_kv_hold = std::chrono::seconds(10);
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;
  void on_tick(transport::endpoint& out) override;

  int64_t free_kv_blocks() const;
  int64_t kv_blocks_total() const { return pool_.num_blocks(); }

private:
  // True when `key` waits for its KV and `from` is the prefill instance asked for it; a message
  // about it from anyone else is rejected.
  bool from_asked_prefill(const transport::peer_id& from, const protocol::request_key& key,
                          const char* what, transport::endpoint& out);
  struct awaiting_kv {
    std::unique_ptr<decode_sequence> seq;
    std::vector<bool> received; // per block of the KV that comes
    int64_t blocks_received = 0;
    protocol::moved_kv moved; // set: the KV comes from a draining decode instance
  };
  // A sequence moving off this instance, its KV kept for the instance it is placed on.
  struct moving_sequence {
    std::unique_ptr<decode_sequence> seq;
    std::chrono::steady_clock::time_point since;
    transport::peer_id fetcher; // who asked for its KV ("" : nobody yet)
    // The compute thread reads its blocks now: letting them go waits until it is done.
    bool shipping = false, forget_when_shipped = false;
  };
  struct local_prefill {
    std::unique_ptr<decode_sequence> seq;
    prefill_job job;
  };

  // Ends a request wherever it is: awaiting KV (here), or queued or running (compute thread).
  void cancel(const protocol::request_key& key, protocol::error why);
  void release(decode_sequence& s);
  // release() without the finished-list entry: the pool part (any thread, no worker_ lock).
  void return_blocks(decode_sequence& s);
  // A sequence leaving the batch: with [ems] store_decode_kv, the blocks its decode arithmetic
  // filled go to the pool first (those not mirrored yet); then its KV is released.
  void leave_batch(decode_sequence& s);
  // Hands the full blocks of `s` not in the pool yet to it, without waiting (compute thread).
  void mirror(decode_sequence& s);
  // Ends a request that never reached the batch, telling its gateway.
  void end_unbatched(std::unique_ptr<decode_sequence> s, protocol::error why);
  void send_updates(std::vector<protocol::token_update> updates);
  bool draining() const { return drain_.load() >= 0; }
  // Compute thread: parks the batch's movable sequences (migrate drain) and ships the KV asked
  // for since the last round.
  void move_out(std::vector<protocol::token_update>& updates);
  void ship_fetched();
  // Lets a moving sequence's KV go (fetched, or nobody came for it); under worker_.mutex().
  void forget_moving(std::map<protocol::request_key, moving_sequence>::iterator it);

  bool has_work() const; // with worker_.mutex() held
  // The group broke: every request here ends with `why`.
  void fail_everything(const protocol::error& why, std::vector<protocol::token_update>& updates);
  void compute_round();
  void apply_cancels(std::vector<protocol::token_update>& updates);
  void prefill_locally();
  // Copies a sequence's arrived KV runs into its table (compute thread).
  void import_kv(decode_sequence& s);

  serving_config config_;
  model::transformer model_;
  model::kv_block_pool pool_;
  mutable std::mutex pool_mutex_; // allocation state of pool_ (block contents need no lock)
  std::atomic<int64_t> blocks_released_{0};
  // The batch's MTP counters, copied after each round for load reports (the actor's thread).
  std::atomic<int64_t> mtp_drafted_{0}, mtp_accepted_{0}, mtp_drafting_steps_{0}, mtp_depth_{0};
  transport::endpoint* out_ = nullptr;

  // Actor thread only.
  std::map<protocol::request_key, awaiting_kv> awaiting_;

  // Handed from the actor thread to the compute thread, under worker_.mutex().
  std::deque<std::pair<std::unique_ptr<decode_sequence>, int32_t>> ready_; // KV in, first token
  std::deque<std::unique_ptr<decode_sequence>> to_prefill_;
  struct pending_cancel {
    protocol::request_key key; // id 0: every request of key.gateway
    protocol::error why;
  };
  std::vector<pending_cancel> cancels_;
  std::vector<protocol::request_key> finished_; // since the last load report
  std::map<protocol::request_key, moving_sequence> moving_;
  std::deque<std::pair<transport::peer_id, protocol::prefill_request>> fetches_;

  // Compute thread only.
  decode_batch batch_;
  prefill_engine prefill_;
  std::deque<local_prefill> prefilling_;
  std::atomic<int64_t> running_{0}, waiting_{0};
  std::atomic<int64_t> moving_count_{0}; // entries of moving_
  std::atomic<uint64_t> moved_in_{0}, moved_out_{0};
  std::atomic<int> drain_{-1};        // a drain_mode once draining
  std::atomic<int64_t> batch_cap_{0}; // the planner's (decode_batch_cap); 0: max_batch
  std::unique_ptr<ep_rank> group_;    // expert parallelism; null for a lone rank
  // The pool for decode-made KV; null when [ems] store_decode_kv is off. Made in start().
  std::unique_ptr<ems::context_cache_client> cache_;
  std::unique_ptr<microbatch_pipeline> microbatches_;
  compute_worker worker_; // last: its thread stops before the members it uses go
};

} // namespace supernode::services
