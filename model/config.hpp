#pragma once
// DeepSeek-V3 model configuration, read from a Hugging Face config.json with its field names.

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace supernode::model {

struct rope_scaling_config {
  std::string type = "none"; // "yarn" or "none"
  double factor = 1.0;
  int64_t original_max_position_embeddings = 4096;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 0.0;
};

struct fp8_quantization_config {
  bool enabled = false; // quant_method "fp8": weights E4M3 with weight_scale_inv blocks
  int64_t block_rows = 128;
  int64_t block_cols = 128;
};

struct model_config {
  std::string model_type = "deepseek_v3";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;     // dense MLP of the first layers
  int64_t moe_intermediate_size = 0; // one routed expert; the shared expert is n_shared times wider
  int64_t num_hidden_layers = 0;
  int64_t num_nextn_predict_layers = 0; // MTP modules stored after the main layers
  int64_t num_attention_heads = 0;
  int64_t q_lora_rank = 0; // 0: q is one projection (wq), as in V2-Lite
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t n_routed_experts = 0;
  int64_t n_shared_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  int64_t first_k_dense_replace = 0;
  int64_t moe_layer_freq = 1;
  double routed_scaling_factor = 1.0;
  std::string scoring_func = "sigmoid";
  std::string topk_method = "noaux_tc";
  bool norm_topk_prob = true;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 4096;
  rope_scaling_config rope_scaling;
  fp8_quantization_config quantization;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  bool tie_word_embeddings = false;

  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  bool is_moe_layer(int64_t layer) const {
    return n_routed_experts > 0 && layer >= first_k_dense_replace && layer % moe_layer_freq == 0;
  }
  // Scale applied to q·k: 1/sqrt(qk_head_dim), times mscale^2 under YaRN (HF DeepseekV3Attention).
  double softmax_scale() const;
  // Total parameter count implied by the shapes (MTP layers included).
  int64_t parameter_count() const;

  // Throws std::runtime_error naming the field when a value is missing or inconsistent.
  void validate() const;
  static model_config from_json(const nlohmann::json& j);
  static model_config load(const std::filesystem::path& config_json);
  nlohmann::json to_json() const;
};

// YaRN's attention-temperature correction (HF yarn_get_mscale).
double yarn_get_mscale(double scale, double mscale);

} // namespace supernode::model
