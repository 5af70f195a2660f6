#include "model/checkpoint_layout.hpp"

namespace supernode::model {

std::string layer_prefix(int64_t layer) {
  return "model.layers." + std::to_string(layer) + ".";
}

namespace {

// One dimension of a tensor and the config field (or expression of fields) it comes from.
struct dim {
  int64_t size;
  std::string field;
};

struct layout_writer {
  const model_config& c;
  const std::function<void(const tensor_spec&)>& emit;

  void add(std::string name, std::initializer_list<dim> dims, tensor_role role) {
    tensor_spec s{std::move(name), {}, role, {}};
    for (auto& d : dims) {
      s.shape.push_back(d.size);
      s.shape_fields.push_back(d.field);
    }
    emit(s);
  }

  dim hidden() const { return {c.hidden_size, "hidden_size"}; }
  dim vocab() const { return {c.vocab_size, "vocab_size"}; }
  dim experts() const { return {c.n_routed_experts, "n_routed_experts"}; }

  void add_mlp(const std::string& p, dim inter) {
    add(p + "gate_proj.weight", {inter, hidden()}, tensor_role::linear);
    add(p + "up_proj.weight", {inter, hidden()}, tensor_role::linear);
    add(p + "down_proj.weight", {hidden(), inter}, tensor_role::output_proj);
  }

  void add_block(int64_t layer) {
    const std::string p = layer_prefix(layer);
    const int64_t nh = c.num_attention_heads;
    add(p + "input_layernorm.weight", {hidden()}, tensor_role::norm);
    const std::string a = p + "self_attn.";
    const dim q_heads{nh * c.qk_head_dim(),
                      "num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim)"};
    if (c.q_lora_rank > 0) {
      const dim q_lora{c.q_lora_rank, "q_lora_rank"};
      add(a + "q_a_proj.weight", {q_lora, hidden()}, tensor_role::linear);
      add(a + "q_a_layernorm.weight", {q_lora}, tensor_role::norm);
      add(a + "q_b_proj.weight", {q_heads, q_lora}, tensor_role::linear);
    } else {
      add(a + "q_proj.weight", {q_heads, hidden()}, tensor_role::linear);
    }
    const dim kv_lora{c.kv_lora_rank, "kv_lora_rank"};
    add(a + "kv_a_proj_with_mqa.weight",
        {{c.kv_lora_rank + c.qk_rope_head_dim, "kv_lora_rank + qk_rope_head_dim"}, hidden()},
        tensor_role::linear);
    add(a + "kv_a_layernorm.weight", {kv_lora}, tensor_role::norm);
    add(a + "kv_b_proj.weight",
        {{nh * (c.qk_nope_head_dim + c.v_head_dim),
          "num_attention_heads * (qk_nope_head_dim + v_head_dim)"},
         kv_lora},
        tensor_role::linear);
    add(a + "o_proj.weight", {hidden(), {nh * c.v_head_dim, "num_attention_heads * v_head_dim"}},
        tensor_role::output_proj);
    add(p + "post_attention_layernorm.weight", {hidden()}, tensor_role::norm);
    if (!c.is_moe_layer(layer)) {
      add_mlp(p + "mlp.", {c.intermediate_size, "intermediate_size"});
      return;
    }
    const std::string m = p + "mlp.";
    add(m + "gate.weight", {experts(), hidden()}, tensor_role::gate);
    if (c.topk_method == "noaux_tc")
      add(m + "gate.e_score_correction_bias", {experts()}, tensor_role::gate_bias);
    const dim expert_inter{c.moe_intermediate_size, "moe_intermediate_size"};
    for (int64_t e = 0; e < c.n_routed_experts; ++e)
      add_mlp(m + "experts." + std::to_string(e) + ".", expert_inter);
    if (c.n_shared_experts > 0)
      add_mlp(m + "shared_experts.", {c.moe_intermediate_size * c.n_shared_experts,
                                      "moe_intermediate_size * n_shared_experts"});
  }

  void add_all() {
    add("model.embed_tokens.weight", {vocab(), hidden()}, tensor_role::embedding);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) add_block(l);
    for (int64_t l = c.num_hidden_layers; l < c.num_hidden_layers + c.num_nextn_predict_layers;
         ++l) {
      // DeepSeek-V3's MTP module: its own copies of the embedding and head, two norms and the
      // projection that mixes the next token's embedding with the main model's hidden state.
      const std::string p = layer_prefix(l);
      add(p + "embed_tokens.weight", {vocab(), hidden()}, tensor_role::embedding);
      add(p + "enorm.weight", {hidden()}, tensor_role::norm);
      add(p + "hnorm.weight", {hidden()}, tensor_role::norm);
      add(p + "eh_proj.weight", {hidden(), {2 * c.hidden_size, "2 * hidden_size"}},
          tensor_role::mtp_proj);
      add_block(l);
      add(p + "shared_head.norm.weight", {hidden()}, tensor_role::norm);
      add(p + "shared_head.head.weight", {vocab(), hidden()}, tensor_role::head);
    }
    add("model.norm.weight", {hidden()}, tensor_role::norm);
    add("lm_head.weight", {vocab(), hidden()}, tensor_role::head);
  }
};

} // namespace

void for_each_tensor_spec(const model_config& c, const std::function<void(const tensor_spec&)>& f) {
  layout_writer{c, f}.add_all();
}

std::vector<tensor_spec> checkpoint_layout(const model_config& c) {
  std::vector<tensor_spec> out;
  for_each_tensor_spec(c, [&](const tensor_spec& s) { out.push_back(s); });
  return out;
}

std::vector<int64_t> fp8_scale_shape(const model_config& c, std::span<const int64_t> shape) {
  const auto& q = c.quantization;
  return {(shape[0] + q.block_rows - 1) / q.block_rows,
          (shape[1] + q.block_cols - 1) / q.block_cols};
}

bool stored_as_fp8(const tensor_spec& s, const model_config& c) {
  return c.quantization.enabled &&
         (s.role == tensor_role::linear || s.role == tensor_role::output_proj);
}

std::vector<safetensors_writer::entry> checkpoint_entries(const std::vector<tensor_spec>& specs,
                                                          const model_config& c) {
  std::vector<safetensors_writer::entry> entries;
  for (auto& s : specs) {
    const dtype t = s.role == tensor_role::gate_bias ? dtype::f32
                    : stored_as_fp8(s, c)            ? dtype::f8_e4m3
                                                     : dtype::bf16;
    entries.push_back({s.name, t, s.shape});
    if (t == dtype::f8_e4m3)
      entries.push_back({s.name + "_scale_inv", dtype::f32, fp8_scale_shape(c, s.shape)});
  }
  return entries;
}

} // namespace supernode::model
