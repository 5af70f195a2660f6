#pragma once
// One rank of an expert-parallel group (§4.2): the routed experts of every MoE layer, spread over
// the group by an expert_placement and reached with FusedDispatch and FusedCombine over a
// rank_fabric. A decode (or prefill) rank plugs this into its transformer; an expert shard
// (attention/MoE split, §6.2.1) hosts experts and never has tokens of its own.
//
// Every forward of every rank is collective: for each MoE layer (twice with microbatching)
// every rank takes part in one op, with or without tokens. A rank with nothing of its own runs
// serve_idle_forward() whenever a peer has announced a forward, so ops always line up.
//
// One op m (slot m % 2), on each rank:
//   dispatch  gate; quantize each token once; write (payload, scale, source, batch slot, route
//             slot, expert) into the hosting rank's dispatch buffer, one contiguous run per
//             destination; then every rank gets this rank's count and an arrival.
//   experts   wait for all R arrivals, bucket messages by expert in (source, index) order,
//             grouped INT8 GEMM, write each output to its source's combine buffer at
//             [batch slot][route slot]; bump the source's combine flag by the outputs sent.
//   combine   wait until all rows × k outputs are in, check every stamp, sum in route-slot order.
// Slot reuse is safe without extra acknowledgements: a rank writes op m+2 only after finishing
// op m+1, which needed every peer's op m+1 arrival, sent after that peer finished reading op m.

#include "model/moe_layer.hpp"
#include "model/transformer.hpp"
#include "services/moe/ep_layout.hpp"
#include "services/moe/expert_placement.hpp"
#include "transport/rank_fabric.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace supernode::services {

// The group can no longer run ops (a peer died or left, an op timed out, a protocol violation).
struct ep_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ep_options {
  int32_t rank = 0;
  int32_t ranks = 1;
  // Fabric ranks that host routed experts, in placement order; empty: every rank.
  std::vector<int32_t> expert_hosts;
  int64_t local_batch = 64;       // most tokens this rank (or any rank) sends in one op
  int32_t microbatches = 1;       // ops per MoE layer per forward (2 with microbatch pipelining)
  int32_t redundant_per_rank = 0; // replica slots EPLB may add on each host
  int64_t eplb_interval = 0;      // forwards between re-placements; 0: off
  std::chrono::milliseconds op_timeout{60000};
};

// Per-stage wall time, summed per MoE layer (Figure 20b's breakdown).
struct ep_stage_times {
  enum stage : int { attention, gate, dispatch, experts, combine, idle, count };
  static const char* name(int s);
  std::vector<std::array<double, count>> seconds; // [moe layer][stage]
  uint64_t ops = 0, forwards = 0;
  // Summed over ops: from this rank's first dispatch write until every peer's dispatch is in,
  // and from its first combine write until every output for its tokens is in (Table 7).
  double dispatch_latency = 0, combine_latency = 0;
  void add(const ep_stage_times& other);
};

class expert_parallel final : public model::routed_experts {
public:
  // The region every rank of the group registers for this model and options.
  static ep_layout layout_for(const model::model_config& config, model::precision prec,
                              const ep_options& options);

  // `fabric` is connected and outlives this object.
  expert_parallel(std::shared_ptr<const model::model_weights> weights,
                  transport::rank_fabric& fabric, const ep_options& options);

  // routed_experts: one collective op. Throws ep_failure when the group is broken.
  void forward(int64_t layer, const model::moe_weights& w, const float* x, int64_t rows,
               float* out) override;
  void forward_begins() override;
  // The same op with the routing given and `experts` computing the batches this rank receives
  // (each batch's `out` sized rows x hidden): forward() passes the gate's routing and the
  // grouped GEMMs; `bench moe` passes precomputed routes and no computation to time the
  // protocol alone.
  using expert_step = std::function<void(std::span<model::expert_batch* const>)>;
  void exchange(int64_t layer, const model::moe_routing& routing, const float* x, int64_t rows,
                float* out, const expert_step& experts);

  // Between forwards: has a peer started the forward this rank has not yet joined?
  bool peer_waiting() const;
  // Takes part in that forward with no tokens.
  void serve_idle_forward();
  // Sleeps until the doorbell moves past `seen` (doorbell_value() read before checking for
  // work), at most `timeout`.
  uint64_t doorbell_value() const;
  void sleep(uint64_t seen, std::chrono::milliseconds timeout);
  // Wakes this rank's sleeping compute thread (new local work, stop).
  void ring();
  // Marks the group broken from outside (a peer reported down by membership); ops in progress
  // and later ones throw ep_failure naming `why`.
  void fail(const std::string& why);
  std::string failure() const;

  int32_t rank() const { return options_.rank; }
  const ep_layout& layout() const { return layout_; }
  const expert_placement& placement(int64_t moe_layer) const { return placements_[moe_layer]; }
  uint64_t placement_version() const { return placement_version_; }
  ep_stage_times stage_times() const; // a copy, safe from any thread
  // max/mean load of the expert hosts before and after the last re-placement (EPLB).
  struct rebalance_report {
    uint64_t version = 0;
    double ratio_before = 0, ratio_after = 0;
  };
  rebalance_report last_rebalance() const;
  rebalance_report first_rebalance() const; // its "before" is the uniform placement

private:
  // A dispatch message in this rank's region, its header read (and checked) once.
  struct received {
    const std::byte* payload;
    dispatch_header header;
  };
  void wait_flag(size_t flag, uint64_t at_least, const char* what, uint64_t op);
  void check_failed() const;
  // What peers that left wrote in their notes ("; rank 0 said: rank 2 (pid 77) is gone").
  std::string peer_notes() const;
  void announce();
  int64_t begin_op(int64_t layer, int64_t rows); // returns the MoE layer index
  void run_op(int64_t moe_layer, const model::moe_routing& routing, const float* x, int64_t rows,
              float* out, const expert_step& experts);
  void dispatch(int slot, uint64_t op, int64_t moe_layer, const model::moe_routing& routing,
                const float* x, int64_t rows);
  void serve_experts(int slot, uint64_t op, int64_t moe_layer, const expert_step& experts);
  void combine(int slot, uint64_t op, int64_t moe_layer, const model::moe_routing& routing,
               int64_t rows, float* out);
  void record(int64_t moe_layer, int stage, std::chrono::steady_clock::time_point& since);
  // EPLB, at forward boundaries.
  void exchange_stats();
  void apply_published_placement();

  std::shared_ptr<const model::model_weights> weights_;
  transport::rank_fabric& fabric_;
  ep_options options_;
  ep_layout layout_;
  std::vector<int32_t> hosts_;
  std::vector<int64_t> moe_layer_of_; // model layer -> MoE layer index (or -1)
  std::vector<expert_placement> placements_;
  uint64_t placement_version_ = 0;

  uint64_t ops_ = 0; // collective ops completed
  uint64_t combine_expected_[2] = {0, 0};
  std::chrono::steady_clock::time_point last_op_end_{}, dispatch_start_{}, combine_start_{};
  bool announced_early_ = false; // forward_begins() announced the forward about to start
  std::chrono::steady_clock::time_point forward_start_{};

  // Scratch.
  model::moe_routing routing_;
  kernels::quantized_rows xq_;
  std::vector<std::byte> staging_;
  std::vector<int64_t> per_dest_;
  std::vector<model::expert_batch> batches_;
  std::vector<model::expert_batch*> batch_pointers_;
  std::vector<std::vector<received>> by_expert_;
  std::vector<uint64_t> combines_sent_;    // per source rank, this op
  std::vector<std::byte> combine_message_; // stamp, then one output row

  // EPLB: routed tokens of this rank's own tokens since the last exchange, [moe layer][expert].
  std::vector<uint32_t> routed_counts_;
  uint64_t stats_rounds_ = 0;    // rank 0: rounds of stats planned from
  uint64_t placements_seen_ = 0; // publications read
  struct pending_placement {
    uint64_t version = 0, effective_forward = 0;
    std::vector<expert_placement> placements;
  };
  std::optional<pending_placement> pending_;

  mutable std::mutex shared_mutex_; // stage times, failure text, rebalance report
  ep_stage_times times_;
  std::string failure_;
  std::atomic<bool> failed_{false};
  rebalance_report rebalance_, first_rebalance_;
};

} // namespace supernode::services
