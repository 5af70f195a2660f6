#include "model/config.hpp"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace supernode::model {

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

double model_config::softmax_scale() const {
  double s = 1.0 / std::sqrt(static_cast<double>(qk_head_dim()));
  if (rope_scaling.type == "yarn" && rope_scaling.mscale_all_dim != 0.0) {
    double m = yarn_get_mscale(rope_scaling.factor, rope_scaling.mscale_all_dim);
    s *= m * m;
  }
  return s;
}

namespace {

template<class T>
void read(const nlohmann::json& j, const char* key, T& out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) throw std::runtime_error(std::string("config.json: missing field '") + key + "'");
    return;
  }
  // A float where an integer belongs (1e30 does not fit int64 either) is a wrong type, not a
  // silent truncation.
  if constexpr (std::is_same_v<T, int64_t>)
    if (!it->is_number_integer())
      throw std::runtime_error(std::string("config.json: field '") + key +
                               "' has the wrong type (expected an integer, got " + it->dump() +
                               ")");
  try {
    out = it->get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("config.json: field '") + key + "' has the wrong type (" +
                             e.what() + ")");
  }
}

// A value outside [lo, hi] names the field, the value and the range. The bounds hold every
// released DeepSeek-style model with room to spare (V3: 61 layers, 256 experts, hidden 7168)
// and keep every size the loader derives from them far from overflow; without them a typo like
// num_hidden_layers = 1000000 surfaces as a bad_alloc after seconds of work.
template<class T>
void require_range(T v, const char* key, T lo, T hi) {
  if (v >= lo && v <= hi) return; // false for NaN too
  std::ostringstream out;
  out << "config.json: field '" << key << "' = " << v << " is out of range [" << lo << ", " << hi
      << "]";
  throw std::runtime_error(out.str());
}

constexpr int64_t max_layers = 1024;
constexpr int64_t max_width = int64_t{1} << 16;     // hidden size, LoRA ranks
constexpr int64_t max_ffn_width = int64_t{1} << 18; // MLP intermediate sizes
constexpr int64_t max_vocab = int64_t{1} << 22;
constexpr int64_t max_heads = 1024;
constexpr int64_t max_head_dim = 4096;
constexpr int64_t max_experts = 4096;
constexpr int64_t max_positions = int64_t{1} << 24;

} // namespace

model_config model_config::from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw std::runtime_error("config.json: top level is not an object");
  model_config c;
  read(j, "model_type", c.model_type, false);
  read(j, "vocab_size", c.vocab_size, true);
  read(j, "hidden_size", c.hidden_size, true);
  read(j, "intermediate_size", c.intermediate_size, true);
  read(j, "moe_intermediate_size", c.moe_intermediate_size, false);
  read(j, "num_hidden_layers", c.num_hidden_layers, true);
  read(j, "num_nextn_predict_layers", c.num_nextn_predict_layers, false);
  read(j, "num_attention_heads", c.num_attention_heads, true);
  read(j, "q_lora_rank", c.q_lora_rank, false);
  read(j, "kv_lora_rank", c.kv_lora_rank, true);
  read(j, "qk_nope_head_dim", c.qk_nope_head_dim, true);
  read(j, "qk_rope_head_dim", c.qk_rope_head_dim, true);
  read(j, "v_head_dim", c.v_head_dim, true);
  read(j, "n_routed_experts", c.n_routed_experts, false);
  read(j, "n_shared_experts", c.n_shared_experts, false);
  read(j, "num_experts_per_tok", c.num_experts_per_tok, false);
  read(j, "n_group", c.n_group, false);
  read(j, "topk_group", c.topk_group, false);
  read(j, "first_k_dense_replace", c.first_k_dense_replace, false);
  read(j, "moe_layer_freq", c.moe_layer_freq, false);
  read(j, "routed_scaling_factor", c.routed_scaling_factor, false);
  read(j, "scoring_func", c.scoring_func, false);
  read(j, "topk_method", c.topk_method, false);
  read(j, "norm_topk_prob", c.norm_topk_prob, false);
  read(j, "rms_norm_eps", c.rms_norm_eps, false);
  read(j, "rope_theta", c.rope_theta, false);
  read(j, "max_position_embeddings", c.max_position_embeddings, false);
  read(j, "bos_token_id", c.bos_token_id, false);
  read(j, "eos_token_id", c.eos_token_id, false);
  read(j, "tie_word_embeddings", c.tie_word_embeddings, false);
  if (auto it = j.find("rope_scaling"); it != j.end() && it->is_object()) {
    auto& r = *it;
    read(r, "type", c.rope_scaling.type, false);
    if (r.contains("rope_type")) read(r, "rope_type", c.rope_scaling.type, false);
    read(r, "factor", c.rope_scaling.factor, false);
    read(r, "original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings,
         false);
    read(r, "beta_fast", c.rope_scaling.beta_fast, false);
    read(r, "beta_slow", c.rope_scaling.beta_slow, false);
    read(r, "mscale", c.rope_scaling.mscale, false);
    read(r, "mscale_all_dim", c.rope_scaling.mscale_all_dim, false);
  }
  if (auto it = j.find("quantization_config"); it != j.end() && it->is_object()) {
    std::string method;
    read(*it, "quant_method", method, false);
    if (method != "fp8")
      throw std::runtime_error("config.json: quantization_config.quant_method '" + method +
                               "' is not supported (only fp8)");
    c.quantization.enabled = true;
    if (auto b = it->find("weight_block_size"); b != it->end()) {
      if (!b->is_array() || b->size() != 2)
        throw std::runtime_error("config.json: weight_block_size must be [rows, cols]");
      c.quantization.block_rows = (*b)[0].get<int64_t>();
      c.quantization.block_cols = (*b)[1].get<int64_t>();
    }
  }
  c.validate();
  return c;
}

void model_config::validate() const {
  require_range<int64_t>(vocab_size, "vocab_size", 1, max_vocab);
  require_range<int64_t>(hidden_size, "hidden_size", 1, max_width);
  require_range<int64_t>(num_hidden_layers, "num_hidden_layers", 1, max_layers);
  require_range<int64_t>(num_nextn_predict_layers, "num_nextn_predict_layers", 0, 16);
  require_range<int64_t>(num_attention_heads, "num_attention_heads", 1, max_heads);
  require_range<int64_t>(q_lora_rank, "q_lora_rank", 0, max_width);
  require_range<int64_t>(kv_lora_rank, "kv_lora_rank", 1, max_width);
  require_range<int64_t>(qk_nope_head_dim, "qk_nope_head_dim", 1, max_head_dim);
  require_range<int64_t>(qk_rope_head_dim, "qk_rope_head_dim", 2, max_head_dim);
  if (qk_rope_head_dim % 2 != 0)
    throw std::runtime_error("config.json: field 'qk_rope_head_dim' = " +
                             std::to_string(qk_rope_head_dim) + " must be even (rotary pairs)");
  require_range<int64_t>(v_head_dim, "v_head_dim", 1, max_head_dim);
  require_range<int64_t>(n_routed_experts, "n_routed_experts", 0, max_experts);
  require_range<int64_t>(first_k_dense_replace, "first_k_dense_replace", 0, num_hidden_layers);
  if (n_routed_experts > 0)
    require_range<int64_t>(moe_layer_freq, "moe_layer_freq", 1, num_hidden_layers);
  bool has_dense = false; // a layer (or MTP module) with the dense MLP needs intermediate_size
  for (int64_t l = 0; l < num_hidden_layers + num_nextn_predict_layers; ++l)
    has_dense |= !is_moe_layer(l);
  require_range<int64_t>(intermediate_size, "intermediate_size", has_dense ? 1 : 0, max_ffn_width);
  if (n_routed_experts > 0) {
    require_range<int64_t>(moe_intermediate_size, "moe_intermediate_size", 1, max_ffn_width);
    require_range<int64_t>(n_shared_experts, "n_shared_experts", 0, 64);
    require_range<int64_t>(moe_intermediate_size * n_shared_experts,
                           "moe_intermediate_size * n_shared_experts", 0, max_ffn_width);
    require_range<int64_t>(num_experts_per_tok, "num_experts_per_tok", 1, n_routed_experts);
    require_range<int64_t>(n_group, "n_group", 1, n_routed_experts);
    if (n_routed_experts % n_group != 0)
      throw std::runtime_error("config.json: n_routed_experts must be a multiple of n_group");
    require_range<int64_t>(topk_group, "topk_group", 1, n_group);
    if (num_experts_per_tok > topk_group * (n_routed_experts / n_group))
      throw std::runtime_error(
          "config.json: num_experts_per_tok exceeds the experts of the selected groups");
    require_range<double>(routed_scaling_factor, "routed_scaling_factor", 1e-6, 1e6);
    if (scoring_func != "sigmoid" && scoring_func != "softmax")
      throw std::runtime_error("config.json: scoring_func '" + scoring_func + "' is not supported");
  }
  require_range<double>(rms_norm_eps, "rms_norm_eps", 1e-12, 1.0);
  require_range<double>(rope_theta, "rope_theta", 1.0, 1e12);
  require_range<int64_t>(max_position_embeddings, "max_position_embeddings", 1, max_positions);
  require_range<int64_t>(bos_token_id, "bos_token_id", 0, vocab_size - 1);
  require_range<int64_t>(eos_token_id, "eos_token_id", 0, vocab_size - 1);
  if (rope_scaling.type != "none" && rope_scaling.type != "yarn" && rope_scaling.type != "default")
    throw std::runtime_error("config.json: rope_scaling type '" + rope_scaling.type +
                             "' is not supported (yarn only)");
  if (rope_scaling.type == "yarn") {
    const auto& r = rope_scaling;
    require_range<double>(r.factor, "rope_scaling.factor", 1.0, 1e4);
    require_range<int64_t>(r.original_max_position_embeddings,
                           "rope_scaling.original_max_position_embeddings", 1,
                           max_position_embeddings);
    require_range<double>(r.beta_fast, "rope_scaling.beta_fast", 1e-6, 1e6);
    require_range<double>(r.beta_slow, "rope_scaling.beta_slow", 1e-6, 1e6);
    require_range<double>(r.mscale, "rope_scaling.mscale", 0.0, 1e3);
    require_range<double>(r.mscale_all_dim, "rope_scaling.mscale_all_dim", 0.0, 1e3);
  }
  if (quantization.enabled) {
    require_range<int64_t>(quantization.block_rows, "quantization_config.weight_block_size[0]", 1,
                           max_width);
    require_range<int64_t>(quantization.block_cols, "quantization_config.weight_block_size[1]", 1,
                           max_width);
  }
}

model_config model_config::load(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + ": invalid JSON: " + e.what());
  }
  try {
    return from_json(j);
  } catch (const std::runtime_error& e) {
    // The path replaces from_json's generic "config.json: " prefix.
    std::string what = e.what();
    if (what.starts_with("config.json: ")) what.erase(0, 13);
    throw std::runtime_error(path.string() + ": " + what);
  }
}

nlohmann::json model_config::to_json() const {
  nlohmann::json j = {
      {"architectures", {"DeepseekV3ForCausalLM"}},
      {"model_type", model_type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"moe_intermediate_size", moe_intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_nextn_predict_layers", num_nextn_predict_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_attention_heads},
      {"q_lora_rank", q_lora_rank},
      {"kv_lora_rank", kv_lora_rank},
      {"qk_nope_head_dim", qk_nope_head_dim},
      {"qk_rope_head_dim", qk_rope_head_dim},
      {"v_head_dim", v_head_dim},
      {"n_routed_experts", n_routed_experts},
      {"n_shared_experts", n_shared_experts},
      {"num_experts_per_tok", num_experts_per_tok},
      {"n_group", n_group},
      {"topk_group", topk_group},
      {"first_k_dense_replace", first_k_dense_replace},
      {"moe_layer_freq", moe_layer_freq},
      {"routed_scaling_factor", routed_scaling_factor},
      {"scoring_func", scoring_func},
      {"topk_method", topk_method},
      {"norm_topk_prob", norm_topk_prob},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"max_position_embeddings", max_position_embeddings},
      {"bos_token_id", bos_token_id},
      {"eos_token_id", eos_token_id},
      {"tie_word_embeddings", tie_word_embeddings},
      {"hidden_act", "silu"},
      {"torch_dtype", "bfloat16"},
  };
  if (rope_scaling.type == "yarn")
    j["rope_scaling"] = {
        {"type", "yarn"},
        {"factor", rope_scaling.factor},
        {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings},
        {"beta_fast", rope_scaling.beta_fast},
        {"beta_slow", rope_scaling.beta_slow},
        {"mscale", rope_scaling.mscale},
        {"mscale_all_dim", rope_scaling.mscale_all_dim}};
  if (quantization.enabled)
    j["quantization_config"] = {
        {"activation_scheme", "dynamic"},
        {"fmt", "e4m3"},
        {"quant_method", "fp8"},
        {"weight_block_size", {quantization.block_rows, quantization.block_cols}}};
  return j;
}

int64_t model_config::parameter_count() const {
  const int64_t h = hidden_size;
  int64_t attn = (q_lora_rank > 0 ? h * q_lora_rank + q_lora_rank +
                                        q_lora_rank * num_attention_heads * qk_head_dim()
                                  : h * num_attention_heads * qk_head_dim()) +
                 h * (kv_lora_rank + qk_rope_head_dim) + kv_lora_rank +
                 kv_lora_rank * num_attention_heads * (qk_nope_head_dim + v_head_dim) +
                 num_attention_heads * v_head_dim * h + 2 * h;
  int64_t dense = 3 * h * intermediate_size;
  int64_t moe = n_routed_experts * 3 * h * moe_intermediate_size +
                3 * h * moe_intermediate_size * n_shared_experts + n_routed_experts * (h + 1);
  int64_t total = 2 * vocab_size * h + h;
  for (int64_t l = 0; l < num_hidden_layers + num_nextn_predict_layers; ++l) {
    total += attn + (is_moe_layer(l) ? moe : dense);
  }
  total +=
      num_nextn_predict_layers * (3 * h + 2 * h * h); // enorm, hnorm, shared_head.norm, eh_proj
  return total;
}

} // namespace supernode::model
