#pragma once
// A prefill instance (§4.1, §4.3.3): prompts routed here by decode instances queue up; the
// compute thread packs as many as fit a token budget into one step (chunking a longer one),
// samples each finished prompt's first token and ships its whole latent KV once, in runs of
// whole blocks, over the bulk flow into the blocks the decode instance reserved for it.

#include "model/kv_cache.hpp"
#include "model/transformer.hpp"
#include "services/ems/context_cache_client.hpp"
#include "services/moe/ep_rank.hpp"
#include "services/prefill/prefill_engine.hpp"
#include "services/prefill/prefill_interface.hpp"
#include "services/role_logic.hpp"
#include "services/serving/compute_worker.hpp"
#include "services/serving/serving_config.hpp"

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

namespace supernode::services {

class prefill_instance : public role_logic {
public:
  // With a membership, this instance is one rank of an expert-parallel prefill instance.
  prefill_instance(std::shared_ptr<const model::model_weights> weights,
                   const serving_config& config, std::optional<ep_membership> membership = {});
  ~prefill_instance() override;

  using interface = prefill_interface;
  void start(transport::endpoint& out) override;
  void stop() override;
  void on(const transport::peer_id& decode, const protocol::prefill_request& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::cancel_request& m,
          transport::endpoint& out);
  void on(const transport::peer_id& from, const protocol::ems_ring_view& m,
          transport::endpoint& out);
  void on_tick(transport::endpoint& out) override;
  // Takes no new placements (reports itself unavailable) and ends once every prompt it took has
  // shipped its KV.
  void drain(drain_mode mode) override;
  bool drained() const override;
  void on_member_event(const transport::membership_event& event, transport::endpoint& out) override;

private:
  struct queued {
    transport::peer_id decode;
    prefill_job job;
    model::kv_block_table table;
    std::optional<ems::context_lookup> cached; // looked up once admitted (context cache on)
  };

  void compute_round();
  // Moves queued prompts into the running set while the pool has room for them.
  void admit_queued();
  void drop_cancelled();
  void ship(queued& q, const prefill_output& done);
  // Context cache: loads the longest cached prefix of newly admitted prompts, and stores the
  // blocks of a finished prompt that the pool lacked (after its KV has shipped).
  void load_cached_prefixes();
  void store_new_blocks(queued& q);
  void finish(queued& q); // blocks back, prompt tokens counted as completed
  // The group broke: every prompt here fails with `why` (its decode instance is told).
  void fail_everything(const protocol::error& why);

  serving_config config_;
  model::transformer model_;
  model::kv_block_pool pool_;
  prefill_engine engine_;
  transport::endpoint* out_ = nullptr;
  std::atomic<int64_t> tokens_completed_{0}, running_{0}, waiting_{0};
  std::atomic<int64_t> tokens_accepted_{0}; // prompt tokens of every prompt taken
  std::atomic<bool> draining_{false};

  // Shared with the compute thread under worker_.mutex().
  std::deque<std::unique_ptr<queued>> queue_;
  std::set<protocol::request_key> cancelled_;

  std::deque<std::unique_ptr<queued>> active_; // compute thread only
  std::unique_ptr<ep_rank> group_;             // expert parallelism; null for a lone rank

  // Context cache; null when off. Made in start(): the pool client needs the endpoint.
  std::unique_ptr<ems::context_cache_client> cache_;
  compute_worker worker_; // last: its thread stops before the members it uses go
};

} // namespace supernode::services
