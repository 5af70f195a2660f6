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
    std::vector<bool> received; // per prompt block
    int64_t blocks_received = 0;
  };
  struct local_prefill {
    std::unique_ptr<decode_sequence> seq;
    prefill_job job;
  };

  // Ends a request wherever it is: awaiting KV (here), or queued or running (compute thread).
  void cancel(const protocol::request_key& key, protocol::error why);
  void release(decode_sequence& s);
  // A sequence leaving the batch: with [ems] store_decode_kv, the blocks its decode arithmetic
  // filled go to the pool first (those not mirrored yet); then its KV is released.
  void leave_batch(decode_sequence& s);
  // Hands the full blocks of `s` not in the pool yet to it, without waiting (compute thread).
  void mirror(decode_sequence& s);
  // Ends a request that never reached the batch, telling its gateway.
  void end_unbatched(std::unique_ptr<decode_sequence> s, protocol::error why);
  void send_updates(std::vector<protocol::token_update> updates);

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

  // Compute thread only.
  decode_batch batch_;
  prefill_engine prefill_;
  std::deque<local_prefill> prefilling_;
  std::atomic<int64_t> running_{0}, waiting_{0};
  std::atomic<int64_t> batch_cap_{0}; // the planner's (decode_batch_cap); 0: max_batch
  std::unique_ptr<ep_rank> group_;    // expert parallelism; null for a lone rank
  // The pool for decode-made KV; null when [ems] store_decode_kv is off. Made in start().
  std::unique_ptr<ems::context_cache_client> cache_;
  std::unique_ptr<microbatch_pipeline> microbatches_;
  compute_worker worker_; // last: its thread stops before the members it uses go
};

} // namespace supernode::services
