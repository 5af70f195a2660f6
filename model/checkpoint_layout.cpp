#include "model/checkpoint_layout.hpp"

namespace supernode::model {

std::string layer_prefix(int64_t layer) {
  return "model.layers." + std::to_string(layer) + ".";
}

namespace {

void add_mlp(std::vector<tensor_spec>& out, const std::string& p, int64_t hidden, int64_t inter) {
  out.push_back({p + "gate_proj.weight", {inter, hidden}, tensor_role::linear});
  out.push_back({p + "up_proj.weight", {inter, hidden}, tensor_role::linear});
  out.push_back({p + "down_proj.weight", {hidden, inter}, tensor_role::output_proj});
}

void add_block(std::vector<tensor_spec>& out, const model_config& c, int64_t layer) {
  const std::string p = layer_prefix(layer);
  const int64_t h = c.hidden_size, nh = c.num_attention_heads;
  out.push_back({p + "input_layernorm.weight", {h}, tensor_role::norm});
  const std::string a = p + "self_attn.";
  if (c.q_lora_rank > 0) {
    out.push_back({a + "q_a_proj.weight", {c.q_lora_rank, h}, tensor_role::linear});
    out.push_back({a + "q_a_layernorm.weight", {c.q_lora_rank}, tensor_role::norm});
    out.push_back(
        {a + "q_b_proj.weight", {nh * c.qk_head_dim(), c.q_lora_rank}, tensor_role::linear});
  } else {
    out.push_back({a + "q_proj.weight", {nh * c.qk_head_dim(), h}, tensor_role::linear});
  }
  out.push_back({a + "kv_a_proj_with_mqa.weight",
                 {c.kv_lora_rank + c.qk_rope_head_dim, h},
                 tensor_role::linear});
  out.push_back({a + "kv_a_layernorm.weight", {c.kv_lora_rank}, tensor_role::norm});
  out.push_back({a + "kv_b_proj.weight",
                 {nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank},
                 tensor_role::linear});
  out.push_back({a + "o_proj.weight", {h, nh * c.v_head_dim}, tensor_role::output_proj});
  out.push_back({p + "post_attention_layernorm.weight", {h}, tensor_role::norm});
  if (c.is_moe_layer(layer)) {
    const std::string m = p + "mlp.";
    out.push_back({m + "gate.weight", {c.n_routed_experts, h}, tensor_role::gate});
    if (c.topk_method == "noaux_tc")
      out.push_back(
          {m + "gate.e_score_correction_bias", {c.n_routed_experts}, tensor_role::gate_bias});
    for (int64_t e = 0; e < c.n_routed_experts; ++e)
      add_mlp(out, m + "experts." + std::to_string(e) + ".", h, c.moe_intermediate_size);
    if (c.n_shared_experts > 0)
      add_mlp(out, m + "shared_experts.", h, c.moe_intermediate_size * c.n_shared_experts);
  } else {
    add_mlp(out, p + "mlp.", h, c.intermediate_size);
  }
}

} // namespace

std::vector<tensor_spec> checkpoint_layout(const model_config& c) {
  std::vector<tensor_spec> out;
  const int64_t h = c.hidden_size, v = c.vocab_size;
  out.push_back({"model.embed_tokens.weight", {v, h}, tensor_role::embedding});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) add_block(out, c, l);
  for (int64_t l = c.num_hidden_layers; l < c.num_hidden_layers + c.num_nextn_predict_layers; ++l) {
    // DeepSeek-V3's MTP module: its own copies of the embedding and head, two norms and the
    // projection that mixes the next token's embedding with the main model's hidden state.
    const std::string p = layer_prefix(l);
    out.push_back({p + "embed_tokens.weight", {v, h}, tensor_role::embedding});
    out.push_back({p + "enorm.weight", {h}, tensor_role::norm});
    out.push_back({p + "hnorm.weight", {h}, tensor_role::norm});
    out.push_back({p + "eh_proj.weight", {h, 2 * h}, tensor_role::mtp_proj});
    add_block(out, c, l);
    out.push_back({p + "shared_head.norm.weight", {h}, tensor_role::norm});
    out.push_back({p + "shared_head.head.weight", {v, h}, tensor_role::head});
  }
  out.push_back({"model.norm.weight", {h}, tensor_role::norm});
  out.push_back({"lm_head.weight", {v, h}, tensor_role::head});
  return out;
}

} // namespace supernode::model
