#include "model/moe_layer.hpp"

#include "kernels/gemm_fp32.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/moe_gate.hpp"
#include "kernels/thread_pool.hpp"

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
  for (int64_t r = 0; r < rows; ++r)
    kernels::moe_gate(out.logits.data() + r * n_exp, w.correction_bias, gp,
                      out.expert.data() + r * k, out.weight.data() + r * k);
}

void run_experts(const model_config& c, const moe_weights& w, precision prec,
                 std::span<expert_batch* const> all) {
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size;
  std::vector<expert_batch*> batches;
  for (auto* b : all)
    if (b->rows > 0) batches.push_back(b);
  for (auto* b : batches) {
    b->up.resize(b->rows * 2 * inter);
    b->act.resize(b->rows * inter);
    b->out.resize(b->rows * h);
  }
  // SwiGLU of every expert's rows and, for INT8, their per-token quantization for the down
  // projection: one pass over the pool between the two grouped GEMMs.
  const bool int8 = prec == precision::int8;
  auto swiglu = [&] {
    kernels::thread_pool::shared().parallel_for(
        static_cast<int64_t>(batches.size()), [&](int64_t i) {
          auto& b = *batches[i];
          for (int64_t r = 0; r < b.rows; ++r)
            kernels::silu_mul(b.up.data() + r * 2 * inter, b.up.data() + r * 2 * inter + inter,
                              b.act.data() + r * inter, inter);
          if (int8) kernels::quantize_rows(b.act.data(), b.rows, inter, inter, b.mid_q);
        });
  };
  if (int8) {
    std::vector<kernels::gemm_int8_problem> problems;
    for (auto* b : batches)
      problems.push_back({&b->in_q, &w.experts[b->expert].gate_up.int8(), b->up.data(), 2 * inter});
    kernels::gemm_int8_grouped(problems);
    swiglu();
    problems.clear();
    for (auto* b : batches)
      problems.push_back({&b->mid_q, &w.experts[b->expert].down.int8(), b->out.data(), h});
    kernels::gemm_int8_grouped(problems);
  } else {
    std::vector<kernels::gemm_fp32_problem> problems;
    for (auto* b : batches)
      problems.push_back({b->in_f.data(), b->rows, h, &w.experts[b->expert].gate_up.fp32(),
                          b->up.data(), 2 * inter});
    kernels::gemm_fp32_grouped(problems);
    swiglu();
    problems.clear();
    for (auto* b : batches)
      problems.push_back(
          {b->act.data(), b->rows, inter, &w.experts[b->expert].down.fp32(), b->out.data(), h});
    kernels::gemm_fp32_grouped(problems);
  }
}

expert_cost cost_of(const moe_weights& w, std::span<expert_batch* const> batches) {
  expert_cost cost;
  for (auto* b : batches) {
    if (b->rows == 0) continue;
    for (auto* l : {&w.experts[b->expert].gate_up, &w.experts[b->expert].down}) {
      cost.weight_bytes += l->bytes();
      cost.macs += static_cast<uint64_t>(b->rows) * l->n() * l->k();
    }
  }
  return cost;
}

} // namespace supernode::model
