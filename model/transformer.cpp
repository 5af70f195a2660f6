#include "model/transformer.hpp"

#include "kernels/attention.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/gemm_fp32.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/thread_pool.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace supernode::model {

namespace {

kernels::rope_params rope_params_of(const model_config& c) {
  kernels::rope_params p;
  p.dim = c.qk_rope_head_dim;
  p.theta = c.rope_theta;
  p.yarn = c.rope_scaling.type == "yarn";
  p.factor = c.rope_scaling.factor;
  p.original_max_position = c.rope_scaling.original_max_position_embeddings;
  p.beta_fast = c.rope_scaling.beta_fast;
  p.beta_slow = c.rope_scaling.beta_slow;
  p.mscale = c.rope_scaling.mscale;
  p.mscale_all_dim = c.rope_scaling.mscale_all_dim;
  return p;
}

// Runs fn(r0, r1) over ranges of `rows` rows on the shared pool. The row-wise kernels (RMSNorm,
// SwiGLU, RoPE, residual adds) give a row the same bits whichever range it falls in, and a
// prefill has too many rows for one thread.
template<class Fn>
void for_row_ranges(int64_t rows, Fn fn) {
  kernels::parallel_for_ranges(rows, 16, fn);
}

void rms_norm_rows(const float* x, int64_t rows, int64_t dim, int64_t ldx, const float* weight,
                   float eps, float* y, int64_t ldy) {
  for_row_ranges(rows, [&](int64_t r0, int64_t r1) {
    kernels::rms_norm(x + r0 * ldx, r1 - r0, dim, ldx, weight, eps, y + r0 * ldy, ldy);
  });
}

// x += d over `rows` rows of `dim`.
void add_rows(float* x, const float* d, int64_t rows, int64_t dim) {
  for_row_ranges(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * dim; i < r1 * dim; ++i) x[i] += d[i];
  });
}

} // namespace

transformer::transformer(std::shared_ptr<const model_weights> weights)
    : w_(std::move(weights)), rope_(rope_params_of(w_->config)),
      softmax_scale_(static_cast<float>(w_->config.softmax_scale())) {}

kv_block_layout transformer::kv_layout(int64_t block_size, bool with_mtp) const {
  const auto& c = config();
  return {c.num_hidden_layers + (with_mtp ? static_cast<int64_t>(w_->mtp.size()) : 0), block_size,
          c.kv_lora_rank, c.qk_rope_head_dim};
}

void transformer::embed(const std::vector<float>& table, std::span<const int32_t> tokens,
                        float* x) {
  const int64_t h = config().hidden_size, v = config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= v)
      throw std::out_of_range("token id " + std::to_string(tokens[i]) +
                              " is outside the vocabulary [0, " + std::to_string(v) + ")");
    std::copy_n(table.data() + static_cast<int64_t>(tokens[i]) * h, h, x + i * h);
  }
}

void transformer::check_steps(std::span<const sequence_step> steps, int64_t total,
                              const kv_block_pool& pool) const {
  int64_t held = 0;
  for (auto& s : steps) {
    const int64_t capacity =
        static_cast<int64_t>(s.table ? s.table->blocks().size() : 0) * pool.layout().block_size;
    if (s.first_pos < 0 || s.n_tokens < 0 || s.first_pos + s.n_tokens > capacity)
      throw std::invalid_argument(
          "forward: sequence step at position " + std::to_string(s.first_pos) + " with " +
          std::to_string(s.n_tokens) + " tokens has no KV room reserved (capacity " +
          std::to_string(capacity) + ")");
    held += s.n_tokens;
  }
  if (held != total)
    throw std::invalid_argument("forward: " + std::to_string(total) +
                                " tokens given for steps holding " + std::to_string(held));
}

void transformer::forward(std::span<const int32_t> tokens, std::span<const sequence_step> steps,
                          kv_block_pool& pool, std::vector<float>& hidden) {
  const auto& c = config();
  const int64_t rows = static_cast<int64_t>(tokens.size()), h = c.hidden_size;
  check_steps(steps, rows, pool);
  if (routed_) routed_->forward_begins();
  hidden.resize(rows * h);
  embed(*w_->embedding, tokens, hidden.data());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    layer_forward(w_->layers[l], l, hidden.data(), rows, steps, pool);
  kernels::rms_norm(hidden.data(), rows, h, h, w_->final_norm.data(),
                    static_cast<float>(c.rms_norm_eps), hidden.data(), h);
}

void transformer::logits(const float* hidden, int64_t rows, std::vector<float>& out) {
  out.resize(rows * config().vocab_size);
  matmul(*w_->lm_head, hidden, rows, config().hidden_size, out.data(), config().vocab_size);
}

void transformer::mtp_forward(size_t k, std::span<const int32_t> next_tokens,
                              const float* main_hidden, std::span<const sequence_step> steps,
                              kv_block_pool& pool, std::vector<float>& mtp_hidden) {
  if (k >= w_->mtp.size())
    throw std::out_of_range("MTP module " + std::to_string(k) + " is not loaded");
  const auto& m = w_->mtp[k];
  const auto& c = config();
  const int64_t rows = static_cast<int64_t>(next_tokens.size()), h = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  check_steps(steps, rows, pool);
  std::vector<float> cat(rows * 2 * h);
  std::vector<float> e(rows * h);
  embed(*m.embedding, next_tokens, e.data());
  kernels::rms_norm(e.data(), rows, h, h, m.enorm.data(), eps, cat.data(), 2 * h);
  kernels::rms_norm(main_hidden, rows, h, h, m.hnorm.data(), eps, cat.data() + h, 2 * h);
  mtp_hidden.resize(rows * h);
  matmul(m.eh_proj, cat.data(), rows, 2 * h, mtp_hidden.data(), h);
  layer_forward(m.block, c.num_hidden_layers + static_cast<int64_t>(k), mtp_hidden.data(), rows,
                steps, pool);
  kernels::rms_norm(mtp_hidden.data(), rows, h, h, m.head_norm.data(), eps, mtp_hidden.data(), h);
}

void transformer::mtp_logits(size_t k, const float* mtp_hidden, int64_t rows,
                             std::vector<float>& out) {
  out.resize(rows * config().vocab_size);
  matmul(*w_->mtp.at(k).head, mtp_hidden, rows, config().hidden_size, out.data(),
         config().vocab_size);
}

const linear& transformer::mtp_head(size_t k) const {
  return *w_->mtp.at(k).head;
}

void transformer::count(size_t weight_bytes, int64_t rows, int64_t n, int64_t k) {
  streamed_bytes_ += weight_bytes;
  macs_ += static_cast<uint64_t>(rows) * n * k;
}

void transformer::count(const linear& l, int64_t rows) {
  count(l.bytes(), rows, l.n(), l.k());
}

void transformer::matmul(const linear& l, const float* x, int64_t rows, int64_t ldx, float* y,
                         int64_t ldy) {
  count(l, rows);
  l.forward(x, rows, ldx, y, ldy, xq_);
}

void transformer::matmul(const linear& l, const kernels::quantized_rows& xq, float* y,
                         int64_t ldy) {
  count(l, xq.rows);
  l.forward(xq, y, ldy);
}

const kernels::quantized_rows* transformer::quantized_input(const float* x, int64_t rows,
                                                            int64_t cols) {
  if (w_->prec != precision::int8) return nullptr;
  kernels::quantize_rows(x, rows, cols, cols, input_q_);
  return &input_q_;
}

void transformer::matmul_shared_input(const linear& l, const float* x,
                                      const kernels::quantized_rows* xq, int64_t rows, int64_t cols,
                                      float* y, int64_t ldy) {
  if (xq)
    matmul(l, *xq, y, ldy);
  else
    matmul(l, x, rows, cols, y, ldy);
}

void transformer::matmul_shared_input(std::span<const projection> outputs, const float* x,
                                      const kernels::quantized_rows* xq, int64_t rows,
                                      int64_t cols) {
  if (rows == 0) return;
  for (auto& o : outputs) count(*o.l, rows);
  if (xq) {
    std::vector<kernels::gemm_int8_problem> problems;
    for (auto& o : outputs) problems.push_back({xq, &o.l->int8(), o.y, o.ldy});
    kernels::gemm_int8_grouped(problems);
  } else {
    std::vector<kernels::gemm_fp32_problem> problems;
    for (auto& o : outputs) problems.push_back({x, rows, cols, &o.l->fp32(), o.y, o.ldy});
    kernels::gemm_fp32_grouped(problems);
  }
}

void transformer::layer_forward(const layer_weights& w, int64_t kv_layer, float* x, int64_t rows,
                                std::span<const sequence_step> steps, kv_block_pool& pool) {
  const auto& c = config();
  const int64_t h = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  h_.resize(rows * h);
  proj_.resize(rows * h);
  rms_norm_rows(x, rows, h, h, w.input_norm.data(), eps, h_.data(), h);
  attention(w.attn, kv_layer, h_.data(), rows, steps, pool, proj_.data());
  add_rows(x, proj_.data(), rows, h);
  rms_norm_rows(x, rows, h, h, w.post_attention_norm.data(), eps, h_.data(), h);
  if (w.is_moe)
    moe(kv_layer, w.moe, h_.data(), rows, proj_.data());
  else
    mlp(w.dense, h_.data(), nullptr, rows, proj_.data());
  add_rows(x, proj_.data(), rows, h);
}

void transformer::attention(const attention_weights& w, int64_t kv_layer, const float* hn,
                            int64_t rows, std::span<const sequence_step> steps, kv_block_pool& pool,
                            float* out) {
  const auto& c = config();
  const int64_t h = c.hidden_size, nh = c.num_attention_heads, nope = c.qk_nope_head_dim,
                rope = c.qk_rope_head_dim, vd = c.v_head_dim, lora = c.kv_lora_rank,
                qk = c.qk_head_dim(), kvw = nope + vd;
  const float eps = static_cast<float>(c.rms_norm_eps);

  // hn feeds q_a (or q_b) and kv_a: quantized once for both.
  const kernels::quantized_rows* hq = quantized_input(hn, rows, h);
  q_.resize(rows * nh * qk);
  kva_.resize(rows * (lora + rope));
  if (c.q_lora_rank > 0) {
    qa_.resize(rows * c.q_lora_rank);
    const projection down[] = {{&w.q_a, qa_.data(), c.q_lora_rank},
                               {&w.kv_a, kva_.data(), lora + rope}};
    matmul_shared_input(down, hn, hq, rows, h);
    rms_norm_rows(qa_.data(), rows, c.q_lora_rank, c.q_lora_rank, w.q_a_norm.data(), eps,
                  qa_.data(), c.q_lora_rank);
    matmul(w.q_b, qa_.data(), rows, c.q_lora_rank, q_.data(), nh * qk);
  } else {
    const projection both[] = {{&w.q_b, q_.data(), nh * qk}, {&w.kv_a, kva_.data(), lora + rope}};
    matmul_shared_input(both, hn, hq, rows, h);
  }

  // The new tokens' latent KV goes into the cache before attention reads it.
  row_tables_.resize(rows);
  row_positions_.resize(rows);
  for (int64_t row = 0; auto& s : steps)
    for (int64_t i = 0; i < s.n_tokens; ++i, ++row) {
      row_tables_[row] = s.table;
      row_positions_[row] = s.first_pos + i;
    }
  for_row_ranges(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t pos = row_positions_[row];
      float* slot = row_tables_[row]->token_slot(pool, kv_layer, pos);
      const float* src = kva_.data() + row * (lora + rope);
      kernels::rms_norm(src, 1, lora, lora, w.kv_a_norm.data(), eps, slot, lora);
      std::copy_n(src + lora, rope, slot + lora);
      rope_.apply(slot + lora, 1, rope, pos);
      rope_.apply(q_.data() + row * nh * qk + nope, nh, qk, pos);
    }
  });

  attn_out_.resize(rows * nh * vd);
  // Each step's cache view keeps its own block pointers: the decode tokens of every step are
  // attended together after the loop.
  step_blocks_.resize(steps.size());
  decode_tokens_.clear();
  int64_t row = 0;
  for (size_t si = 0; si < steps.size(); ++si) {
    const auto& s = steps[si];
    const int64_t keys = s.first_pos + s.n_tokens;
    auto view = s.table->view(pool, kv_layer, keys, step_blocks_[si]);
    if (s.mode == attention_mode::prefill) {
      // Expand every cached latent (prefix and new tokens alike) to per-head keys and values,
      // so a prefix served from a cache gives the same numbers as one computed here.
      // (Members, not locals: a fresh 8 MB per layer at 2,048 tokens costs its page faults.)
      auto& latent = prefill_latent_;
      auto& kv = prefill_kv_;
      latent.resize(keys * lora);
      kv.resize(keys * nh * kvw);
      for_row_ranges(keys, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
          std::copy_n(view.token(t), lora, latent.data() + t * lora);
      });
      kernels::gemm_fp32(latent.data(), keys, lora, w.kv_b_gemm, kv.data(), nh * kvw);
      count(w.kv_b_gemm.bytes(), keys, w.kv_b_gemm.n(), w.kv_b_gemm.k());
      kernels::mla_prefill({q_.data() + row * nh * qk, kv.data(), view, s.n_tokens, s.first_pos, nh,
                            nope, rope, vd, softmax_scale_, attn_out_.data() + row * nh * vd});
    } else {
      for (int64_t i = 0; i < s.n_tokens; ++i)
        decode_tokens_.push_back({q_.data() + (row + i) * nh * qk, view, s.first_pos + i,
                                  attn_out_.data() + (row + i) * nh * vd});
    }
    row += s.n_tokens;
  }
  if (!decode_tokens_.empty()) {
    // Weight absorption: q_nope·W_uk gives a query in the latent space, and the latent output
    // is mapped back through W_uv, so the cache is never expanded. W_uk and W_uv are streamed
    // once per step, like any weight.
    kernels::mla_decode_step({decode_tokens_,
                              {w.kv_b.data(), w.w_uv_t.data()},
                              nh,
                              nope,
                              rope,
                              vd,
                              lora,
                              softmax_scale_});
    streamed_bytes_ += w.kv_b.size() * sizeof(float);
  }
  matmul(w.o, attn_out_.data(), rows, nh * vd, out, h);
}

void transformer::mlp(const mlp_weights& w, const float* x, const kernels::quantized_rows* xq,
                      int64_t rows, float* out) {
  const int64_t h = config().hidden_size, inter = w.intermediate;
  gu_.resize(rows * 2 * inter);
  act_.resize(rows * inter);
  matmul_shared_input(w.gate_up, x, xq, rows, h, gu_.data(), 2 * inter);
  for_row_ranges(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      kernels::silu_mul(gu_.data() + r * 2 * inter, gu_.data() + r * 2 * inter + inter,
                        act_.data() + r * inter, inter);
  });
  matmul(w.down, act_.data(), rows, inter, out, h);
}

void transformer::moe(int64_t layer, const moe_weights& w, const float* x, int64_t rows,
                      float* out) {
  const auto& c = config();
  const bool local = !routed_ || layer >= c.num_hidden_layers;
  // x quantized once for the local routed experts and the shared expert.
  const kernels::quantized_rows* xq =
      local || w.has_shared ? quantized_input(x, rows, c.hidden_size) : nullptr;
  if (!local) {
    routed_->forward(layer, w, x, rows, out);
    if (w.has_shared) {
      moe_out_.resize(rows * c.hidden_size);
      mlp(w.shared, x, xq, rows, moe_out_.data());
      add_rows(out, moe_out_.data(), rows, c.hidden_size);
    }
  } else {
    count(w.router.bytes(), rows, w.router.n(), w.router.k());
    route_tokens(c, w, x, rows, moe_.routing);
    local_experts(w, x, xq, out);
  }
}

void transformer::local_experts(const moe_weights& w, const float* x,
                                const kernels::quantized_rows* xq, float* out) {
  const auto& c = config();
  const int64_t h = c.hidden_size, n_exp = c.n_routed_experts;
  const auto& routing = moe_.routing;
  const int64_t k = routing.k;
  // Each token quantized once (xq, INT8); experts receive copies of its INT8 row and scale, as
  // the fused dispatch ships them.
  auto& batches = moe_.batches;
  auto& route_row = moe_.route_row;
  gather_routes(routing, n_exp, h, x, xq, batches, route_row);
  auto& pointers = moe_.batch_pointers;
  pointers.clear();
  // The shared expert sees every token: a batch of all the rows, run with the routed ones so
  // its GEMMs share their calls to the pool (two hand-offs fewer per layer), and first, as the
  // largest task when a prefill gives each expert a thread of its own.
  auto& shared = moe_.shared;
  if (w.has_shared) {
    const int64_t rows = routing.rows;
    shared.weights = &w.shared;
    shared.rows = rows;
    if (xq)
      shared.in_q = *xq;
    else
      shared.in_f.assign(x, x + rows * h);
    pointers.push_back(&shared);
  }
  for (auto& b : batches) pointers.push_back(&b);
  const auto cost = cost_of(w, pointers);
  streamed_bytes_ += cost.weight_bytes;
  macs_ += cost.macs;
  run_experts(c, w, w_->prec, pointers);
  combine_routes(
      routing, h,
      [&](int64_t r, int64_t j) {
        return batches[routing.expert[r * k + j]].out.data() + route_row[r * k + j] * h;
      },
      w.has_shared ? shared.out.data() : nullptr, out);
}

} // namespace supernode::model
