#pragma once
// The pieces of one MoE layer, shared by the single-process forward and by expert parallelism
// (services/moe), so both run the very same arithmetic: the gate picks each token's experts and
// weights; expert batches run through their SwiGLU with grouped GEMMs; routed outputs are summed
// per token in route-slot order. Every row is computed independently of the other rows in its
// batch, so a token's expert output is the same bits whichever rank or batch computes it.

#include "kernels/quantize.hpp"
#include "kernels/scratch_vector.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

#include <cstdint>
#include <span>
#include <vector>

namespace supernode::model {

// Each token's top-k experts and their weights, route slot j of token r at [r * k + j].
struct moe_routing {
  int64_t rows = 0, k = 0;
  std::vector<int32_t> expert;
  std::vector<float> weight;
  std::vector<float> logits; // scratch: [rows][experts]
};

// Router (FP32) and the group-limited top-k gate over `rows` normed hidden states.
void route_tokens(const model_config& config, const moe_weights& w, const float* x, int64_t rows,
                  moe_routing& out);

// One expert's rows. In INT8 mode the input is `in_q` (a token quantized once, as dispatch
// ships it); in FP32 mode `in_f`. `out` receives [rows][hidden]. The rest is scratch.
struct expert_batch {
  int32_t expert = 0;
  int64_t rows = 0;
  // The MLP these rows run through: routed expert `expert` when null, else this one (the
  // shared expert, batched with the routed ones so they share the pool's calls).
  const mlp_weights* weights = nullptr;
  kernels::quantized_rows in_q;
  std::vector<float> in_f;
  // Written in full by the expert GEMMs and SwiGLU each step, so never zero-filled.
  kernels::scratch_vector<float> up, act, out;
  kernels::quantized_rows mid_q;
};

// Buckets each route's token into its expert's batch (one batch per expert, batches[e] for
// expert e): route_row[r * k + j] is route (r, j)'s row in its batch. With `xq` (INT8), a batch
// receives copies of the token's quantized row and scale, the token quantized once as the
// fused dispatch ships it; without (FP32), copies of its floats from `x` (row stride hidden).
void gather_routes(const moe_routing& routing, int64_t n_experts, int64_t hidden, const float* x,
                   const kernels::quantized_rows* xq, std::vector<expert_batch>& batches,
                   std::vector<int64_t>& route_row);

// A batch of tokens routed by the gate and gathered per expert in INT8 (each token quantized
// once): what the tests' and benches' reference MoE runs its experts on.
struct routed_batches {
  moe_routing routing;
  std::vector<expert_batch> batches;
  std::vector<int64_t> route_row;
};
routed_batches route_and_gather_int8(const model_config& config, const moe_weights& w,
                                     const float* x, int64_t rows);

// How run_experts spreads the experts over the pool. `grouped`: one grouped GEMM per
// projection, every expert's tiles shared by all threads (a decode's experts, a row or two
// each). `one_per_thread` (INT8 only; FP32 stays grouped): each expert's gate_up, SwiGLU and
// down run back to back on one thread, its intermediates staying in that core's cache (a
// prefill's experts). `automatic` picks by the rows per expert. The bits are the same.
enum class expert_schedule { automatic, grouped, one_per_thread };

// The MLP a batch runs through (expert_batch::weights).
const mlp_weights& weights_of(const moe_weights& w, const expert_batch& b);

// The order in which the one_per_thread schedule hands `batches` to a pool of `shares`
// participants: most rows first, dealt in turn into the pool's contiguous shares
// (thread_pool::parallel_for runs each participant's share front to back, then takes what is
// left of the others' from their far ends). Every thread starts on a large expert and the
// tasks left to take at the end are the smallest, so the end of the layer, where one thread
// waits for the other, is short. Equal rows keep their order.
std::vector<expert_batch*> largest_first_in_shares(std::span<expert_batch* const> batches,
                                                   int shares);

// Runs every batch through its expert (gate_up, SiLU·up, down). Batches with no rows are
// skipped.
void run_experts(const model_config& config, const moe_weights& w, precision prec,
                 std::span<expert_batch* const> batches,
                 expert_schedule schedule = expert_schedule::automatic);

// out[r] = Σ_j weight[r,j] · routed[r,j] in route-slot order, where routed(r, j) points at the
// expert output for route slot j of token r, then + shared[r] when `shared` (rows of `hidden`
// floats: the shared expert's output) is not null. The fixed order keeps the sum
// batch-invariant.
template<class RoutedRow>
void combine_routes(const moe_routing& routing, int64_t hidden, RoutedRow routed,
                    const float* shared, float* out);

// Multiply-accumulates and weight bytes the routed experts of one step cost, for bench figures.
struct expert_cost {
  uint64_t weight_bytes = 0, macs = 0;
};
expert_cost cost_of(const moe_weights& w, std::span<expert_batch* const> batches);

} // namespace supernode::model

#include "kernels/elementwise.hpp"
#include "kernels/thread_pool.hpp"

#include <algorithm>

namespace supernode::model {

template<class RoutedRow>
void combine_routes(const moe_routing& routing, int64_t hidden, RoutedRow routed,
                    const float* shared, float* out) {
  // Tokens are independent (each its own fixed order of slots), so they go to the pool.
  kernels::parallel_for_ranges(routing.rows, 16, [&](int64_t r0, int64_t r1) {
    // One pass over each output row, held in registers while its routes and the shared
    // expert's row are added.
    thread_local std::vector<const float*> route_rows;
    route_rows.resize(static_cast<size_t>(routing.k));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t j = 0; j < routing.k; ++j) route_rows[j] = routed(r, j);
      kernels::weighted_sum_of_rows(route_rows.data(), routing.k, hidden,
                                    routing.weight.data() + r * routing.k,
                                    shared ? shared + r * hidden : nullptr, out + r * hidden);
    }
  });
}

} // namespace supernode::model
