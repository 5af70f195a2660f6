#pragma once
// The DeepSeek-V3 forward pass on our kernels, over any mix of sequences in one step: prefill
// chunks (non-absorbed MLA over the latent cache) and decode tokens (weight-absorbed MLA).
// Every per-token computation is independent of the other tokens in the step, so a sequence's
// results are bit-identical whatever it is batched with.

#include "kernels/attention.hpp"
#include "kernels/quantize.hpp"
#include "kernels/rope.hpp"
#include "kernels/scratch_vector.hpp"
#include "model/kv_cache.hpp"
#include "model/moe_layer.hpp"
#include "model/weights.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace supernode::model {

enum class attention_mode : uint8_t { prefill, decode };

// One sequence's tokens within a forward step. Its table must already have room for
// first_pos + n_tokens tokens (kv_block_table::reserve).
struct sequence_step {
  kv_block_table* table = nullptr;
  int64_t first_pos = 0;
  int64_t n_tokens = 0;
  attention_mode mode = attention_mode::prefill;
};

// Where the routed experts of the main model's MoE layers run: in this transformer (none set) or
// spread over expert-parallel ranks (services/moe). Called once per MoE layer of every forward,
// in layer order, with the layer's normed hidden states; writes the routed experts' weighted sum
// (the transformer adds the shared expert). Forwards with no tokens call it too: a rank with
// nothing of its own to compute still serves its peers' tokens.
class routed_experts {
public:
  virtual ~routed_experts() = default;
  virtual void forward(int64_t layer, const moe_weights& w, const float* x, int64_t rows,
                       float* out) = 0;
  // A forward of the main model starts (before its embedding and dense layers): expert
  // parallelism wakes idle peers here, so they are ready by the first MoE layer.
  virtual void forward_begins() {}
};

// Not thread-safe: one transformer per engine thread (weights are shared, scratch is not).
class transformer {
public:
  explicit transformer(std::shared_ptr<const model_weights> weights);

  const model_config& config() const { return w_->config; }
  const model_weights& weights() const { return *w_; }
  // Layers of KV the cache needs: the main layers, plus the MTP modules when `with_mtp`.
  kv_block_layout kv_layout(int64_t block_size, bool with_mtp) const;

  // Runs `tokens` (the steps' tokens, concatenated in step order) through the main model,
  // writing their latent KV, and returns their final-normed hidden states [tokens][hidden].
  void forward(std::span<const int32_t> tokens, std::span<const sequence_step> steps,
               kv_block_pool& pool, std::vector<float>& hidden);

  // lm_head over `rows` hidden states: out [rows][vocab].
  void logits(const float* hidden, int64_t rows, std::vector<float>& out);

  // MTP module `k`: row i combines the main model's hidden state at a position with the
  // embedding of the token that follows it; the module's own attention uses KV layer
  // num_hidden_layers + k. Returns the module's normed hidden states; mtp_logits maps them.
  void mtp_forward(size_t k, std::span<const int32_t> next_tokens, const float* main_hidden,
                   std::span<const sequence_step> steps, kv_block_pool& pool,
                   std::vector<float>& mtp_hidden);
  void mtp_logits(size_t k, const float* mtp_hidden, int64_t rows, std::vector<float>& out);
  // The output head MTP module `k` drafts through.
  const linear& mtp_head(size_t k) const;

  // Matmul weight bytes the forwards since the last reset had to read: every dense weight
  // once per forward, only the experts some token was routed to. For bandwidth figures.
  uint64_t streamed_weight_bytes() const { return streamed_bytes_; }
  // Multiply-accumulates of all matmuls since the last reset (routed experts by their rows).
  uint64_t matmul_macs() const { return macs_; }
  // nullptr: experts run here. The caller keeps `r` alive while this transformer runs.
  void set_routed_experts(routed_experts* r) { routed_ = r; }
  void reset_counters() { streamed_bytes_ = macs_ = 0; }

private:
  void embed(const std::vector<float>& table, std::span<const int32_t> tokens, float* x);
  // Every step has a table with room for its tokens, and the steps hold `total` tokens.
  void check_steps(std::span<const sequence_step> steps, int64_t total,
                   const kv_block_pool& pool) const;
  void count(size_t weight_bytes, int64_t rows, int64_t n, int64_t k);
  void count(const linear& l, int64_t rows);
  void matmul(const linear& l, const float* x, int64_t rows, int64_t ldx, float* y, int64_t ldy);
  // The same for activations quantized already: one quantization serves every INT8 matmul
  // that reads them.
  void matmul(const linear& l, const kernels::quantized_rows& xq, float* y, int64_t ldy);
  // x (rows of `cols`, contiguous) quantized into input_q_ when the model runs INT8, for every
  // matmul that reads it; nullptr in FP32.
  const kernels::quantized_rows* quantized_input(const float* x, int64_t rows, int64_t cols);
  // x · W^T from `xq` when quantized_input made it, else from the floats.
  void matmul_shared_input(const linear& l, const float* x, const kernels::quantized_rows* xq,
                           int64_t rows, int64_t cols, float* y, int64_t ldy);
  // Several projections of the same x in one grouped GEMM: one hand-off to the pool instead of
  // one per projection (each output's bits are those of its own matmul).
  struct projection {
    const linear* l;
    float* y;
    int64_t ldy;
  };
  void matmul_shared_input(std::span<const projection> outputs, const float* x,
                           const kernels::quantized_rows* xq, int64_t rows, int64_t cols);
  void layer_forward(const layer_weights& w, int64_t kv_layer, float* x, int64_t rows,
                     std::span<const sequence_step> steps, kv_block_pool& pool);
  void attention(const attention_weights& w, int64_t kv_layer, const float* h, int64_t rows,
                 std::span<const sequence_step> steps, kv_block_pool& pool, float* out);
  // `xq`: x already quantized (INT8 weights), or nullptr.
  void mlp(const mlp_weights& w, const float* x, const kernels::quantized_rows* xq, int64_t rows,
           float* out);
  void moe(int64_t layer, const moe_weights& w, const float* x, int64_t rows, float* out);
  // The routed experts and the shared one, on this process.
  void local_experts(const moe_weights& w, const float* x, const kernels::quantized_rows* xq,
                     float* out);

  std::shared_ptr<const model_weights> w_;
  kernels::rope_table rope_;
  float softmax_scale_;
  uint64_t streamed_bytes_ = 0, macs_ = 0;
  routed_experts* routed_ = nullptr;
  // Scratch reused across calls (one transformer per thread).
  kernels::quantized_rows xq_;
  // A layer input quantized once for the several INT8 matmuls that read it (q_a and kv_a; the
  // routed and the shared experts).
  kernels::quantized_rows input_q_;
  std::vector<float> h_, qa_, q_, kva_, attn_out_, proj_;
  // The MLPs' intermediates and the shared expert's output: written in full before read.
  kernels::scratch_vector<float> gu_, act_, moe_out_;
  // Each new row's sequence and position, so the KV writes can run in parallel.
  std::vector<const kv_block_table*> row_tables_;
  std::vector<int64_t> row_positions_;
  std::vector<float> prefill_latent_, prefill_kv_;     // a prefill's latents, expanded per head
  std::vector<std::vector<const float*>> step_blocks_; // each step's cache blocks in one layer
  std::vector<kernels::mla_decode_token> decode_tokens_;
  struct moe_scratch {
    moe_routing routing;
    std::vector<expert_batch> batches; // by expert
    std::vector<expert_batch*> batch_pointers;
    std::vector<int64_t> route_row; // route r*k+j's row in its expert's batch
    expert_batch shared;            // every row, through the shared expert
  } moe_;
};

} // namespace supernode::model
