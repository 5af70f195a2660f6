#include "model/moe_layer.hpp"

#include "kernels/gemm_fp32.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/moe_gate.hpp"
#include "kernels/thread_pool.hpp"

#include <algorithm>

namespace supernode::model {

void route_tokens(const model_config& c, const moe_weights& w, const float* x, int64_t rows,
                  moe_routing& out) {
  const int64_t n_exp = c.n_routed_experts, k = c.num_experts_per_tok;
  out.rows = rows;
  out.k = k;
  out.logits.resize(rows * n_exp);
  out.expert.resize(rows * k);
  out.weight.resize(rows * k);
  if (rows == 0) return;
  kernels::gemm_fp32(x, rows, c.hidden_size, w.router, out.logits.data(), n_exp);
  const kernels::moe_gate_params gp{n_exp,
                                    k,
                                    c.n_group,
                                    c.topk_group,
                                    c.scoring_func == "sigmoid",
                                    c.norm_topk_prob,
                                    static_cast<float>(c.routed_scaling_factor)};
  // Rows are independent: a prefill's hundreds of them go to the pool in ranges.
  kernels::parallel_for_ranges(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      kernels::moe_gate(out.logits.data() + r * n_exp, w.correction_bias, gp,
                        out.expert.data() + r * k, out.weight.data() + r * k);
  });
}

void gather_routes(const moe_routing& routing, int64_t n_experts, int64_t hidden, const float* x,
                   const kernels::quantized_rows* xq, std::vector<expert_batch>& batches,
                   std::vector<int64_t>& route_row) {
  const int64_t routes = routing.rows * routing.k;
  batches.resize(n_experts);
  for (int64_t e = 0; e < n_experts; ++e) {
    batches[e].expert = static_cast<int32_t>(e);
    batches[e].rows = 0;
  }
  route_row.resize(routes);
  for (int64_t i = 0; i < routes; ++i) route_row[i] = batches[routing.expert[i]].rows++;
  for (auto& b : batches) {
    if (xq) {
      b.in_q.rows = b.rows;
      b.in_q.cols = hidden;
      b.in_q.stride = xq->stride;
      b.in_q.q.resize(b.rows * xq->stride);
      b.in_q.scale.resize(b.rows);
    } else {
      b.in_f.resize(b.rows * hidden);
    }
  }
  // Every route has its own row to fill, so a prefill's thousands of copies share the pool.
  kernels::parallel_for_ranges(routes, 256, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      auto& b = batches[routing.expert[i]];
      const int64_t src = i / routing.k, dst = route_row[i];
      if (xq) {
        std::copy_n(xq->row(src), xq->stride, b.in_q.q.data() + dst * xq->stride);
        b.in_q.scale[dst] = xq->scale[src];
      } else {
        std::copy_n(x + src * hidden, hidden, b.in_f.data() + dst * hidden);
      }
    }
  });
}

routed_batches route_and_gather_int8(const model_config& c, const moe_weights& w, const float* x,
                                     int64_t rows) {
  routed_batches r;
  route_tokens(c, w, x, rows, r.routing);
  kernels::quantized_rows xq;
  kernels::quantize_rows(x, rows, c.hidden_size, c.hidden_size, xq);
  gather_routes(r.routing, c.n_routed_experts, c.hidden_size, x, &xq, r.batches, r.route_row);
  return r;
}

const mlp_weights& weights_of(const moe_weights& w, const expert_batch& b) {
  return b.weights ? *b.weights : w.experts[b.expert];
}

namespace {
// SiLU(gate) · up for each row of an expert's gate_up output, `inter` wide.
void swiglu_rows(const float* up, int64_t rows, int64_t inter, float* act) {
  for (int64_t r = 0; r < rows; ++r)
    kernels::silu_mul(up + r * 2 * inter, up + r * 2 * inter + inter, act + r * inter, inter);
}

// Whether each expert is worth a whole thread: enough of them to share the pool, each with
// enough rows that one thread's GEMM is compute-bound (a prefill's experts, not a decode's
// few rows each). On the Zen 5 guest (`bench model --expert-schedule`) one expert per thread
// ran at 1.02-1.07x the grouped schedule's speed at 8 rows per expert, 1.06-1.08x at 32 and
// 64, 1.07-1.08x at 256.
bool experts_fill_the_pool(std::span<expert_batch* const> batches, int threads) {
  int64_t rows = 0;
  for (auto* b : batches) rows += b->rows;
  constexpr int64_t min_mean_rows = 16;
  return static_cast<int64_t>(batches.size()) >= 2 * threads &&
         rows >= min_mean_rows * static_cast<int64_t>(batches.size());
}

// INT8, one expert per task: gate_up, SwiGLU, quantization and down run back to back on one
// thread, so the expert's intermediates (a quarter of a megabyte for 64 rows) stay in that
// core's L2, in buffers the thread reuses for each of its experts, instead of every expert's
// gate_up output going out to memory before the first SwiGLU reads it back. (Buffers per
// batch, written once per layer, gave a third of the gain.) The GEMMs run inline, each as one
// task (thread_pool::parallelism), and their results do not depend on the cut, so the bits
// are the grouped path's.
//
// The experts go to the pool largest first (largest_first_in_shares): in `bench model
// --prefill-only 10` on the Zen 5 guest, the time one thread waited for the other at the end
// of the layer fell from 1.6 % to 0.8 % of the experts' time (the two orders alternated layer
// by layer in one process).
void run_experts_one_per_thread(const model_config& c, const moe_weights& w,
                                std::span<expert_batch* const> batches) {
  const int64_t h = c.hidden_size;
  auto& pool = kernels::thread_pool::shared();
  const auto order = largest_first_in_shares(batches, pool.parallelism());
  pool.parallel_for(static_cast<int64_t>(order.size()), [&](int64_t i) {
    auto& b = *order[i];
    const auto& mlp = weights_of(w, b);
    const int64_t inter = mlp.intermediate;
    thread_local kernels::huge_page_scratch_vector<float> up, act;
    up.resize(b.rows * 2 * inter);
    act.resize(b.rows * inter);
    kernels::gemm_int8(b.in_q, mlp.gate_up.int8(), up.data(), 2 * inter);
    swiglu_rows(up.data(), b.rows, inter, act.data());
    kernels::quantize_rows(act.data(), b.rows, inter, inter, b.mid_q);
    kernels::gemm_int8(b.mid_q, mlp.down.int8(), b.out.data(), h);
  });
}
} // namespace

std::vector<expert_batch*> largest_first_in_shares(std::span<expert_batch* const> batches,
                                                   int shares) {
  std::vector<expert_batch*> by_rows(batches.begin(), batches.end());
  std::stable_sort(by_rows.begin(), by_rows.end(),
                   [](const expert_batch* a, const expert_batch* b) { return a->rows > b->rows; });
  const auto n = static_cast<int64_t>(by_rows.size());
  const int64_t count = std::max(shares, 1);
  std::vector<int64_t> next(count), end(count);
  for (int64_t s = 0; s < count; ++s) {
    const auto share = kernels::thread_pool::share_of(n, s, count);
    next[s] = share.first;
    end[s] = share.end;
  }
  // Deal in turn, passing over the shares already full (the pool's cut is uneven by one).
  std::vector<expert_batch*> order(by_rows.size());
  int64_t s = 0;
  for (auto* b : by_rows) {
    while (next[s] == end[s]) s = (s + 1) % count;
    order[next[s]++] = b;
    s = (s + 1) % count;
  }
  return order;
}

void run_experts(const model_config& c, const moe_weights& w, precision prec,
                 std::span<expert_batch* const> all, expert_schedule schedule) {
  const int64_t h = c.hidden_size;
  auto inter = [&](const expert_batch* b) { return weights_of(w, *b).intermediate; };
  std::vector<expert_batch*> batches;
  for (auto* b : all)
    if (b->rows > 0) batches.push_back(b);
  // Outputs are sized here, on the calling thread: a worker's allocations would come from its
  // own malloc arena, outside the huge-page heap (apps/heap_huge_pages.hpp).
  for (auto* b : batches) b->out.resize(b->rows * h);
  const bool int8 = prec == precision::int8;
  if (schedule == expert_schedule::automatic)
    schedule = experts_fill_the_pool(batches, kernels::thread_pool::shared().parallelism())
                   ? expert_schedule::one_per_thread
                   : expert_schedule::grouped;
  if (int8 && schedule == expert_schedule::one_per_thread) {
    run_experts_one_per_thread(c, w, batches);
    return;
  }
  for (auto* b : batches) {
    b->up.resize(b->rows * 2 * inter(b));
    b->act.resize(b->rows * inter(b));
  }
  // SwiGLU of every expert's rows and, for INT8, their per-token quantization for the down
  // projection: one pass over the pool between the two grouped GEMMs.
  auto swiglu = [&] {
    kernels::thread_pool::shared().parallel_for(
        static_cast<int64_t>(batches.size()), [&](int64_t i) {
          auto& b = *batches[i];
          const int64_t n = inter(&b);
          swiglu_rows(b.up.data(), b.rows, n, b.act.data());
          if (int8) kernels::quantize_rows(b.act.data(), b.rows, n, n, b.mid_q);
        });
  };
  if (int8) {
    std::vector<kernels::gemm_int8_problem> problems;
    for (auto* b : batches)
      problems.push_back({&b->in_q, &weights_of(w, *b).gate_up.int8(), b->up.data(), 2 * inter(b)});
    kernels::gemm_int8_grouped(problems);
    swiglu();
    problems.clear();
    for (auto* b : batches)
      problems.push_back({&b->mid_q, &weights_of(w, *b).down.int8(), b->out.data(), h});
    kernels::gemm_int8_grouped(problems);
  } else {
    std::vector<kernels::gemm_fp32_problem> problems;
    for (auto* b : batches)
      problems.push_back({b->in_f.data(), b->rows, h, &weights_of(w, *b).gate_up.fp32(),
                          b->up.data(), 2 * inter(b)});
    kernels::gemm_fp32_grouped(problems);
    swiglu();
    problems.clear();
    for (auto* b : batches)
      problems.push_back(
          {b->act.data(), b->rows, inter(b), &weights_of(w, *b).down.fp32(), b->out.data(), h});
    kernels::gemm_fp32_grouped(problems);
  }
}

expert_cost cost_of(const moe_weights& w, std::span<expert_batch* const> batches) {
  expert_cost cost;
  for (auto* b : batches) {
    if (b->rows == 0) continue;
    const auto& mlp = weights_of(w, *b);
    for (auto* l : {&mlp.gate_up, &mlp.down}) {
      cost.weight_bytes += l->bytes();
      cost.macs += static_cast<uint64_t>(b->rows) * l->n() * l->k();
    }
  }
  return cost;
}

} // namespace supernode::model
