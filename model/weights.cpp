#include "model/weights.hpp"

#include "kernels/attention.hpp"
#include "kernels/thread_pool.hpp"
#include "model/checkpoint_check.hpp"
#include "model/checkpoint_layout.hpp"
#include "model/progress.hpp"
#include "model/safetensors.hpp"

#include <cstring>
#include <mutex>
#include <stdexcept>

namespace supernode::model {

std::vector<float> read_tensor_float(const checkpoint_reader& ckpt, const model_config& config,
                                     const std::string& name, std::vector<int64_t> shape) {
  const auto& t = ckpt.get(name, shape);
  std::vector<float> out(t.numel());
  if (t.type != dtype::f8_e4m3) {
    t.to_float(out.data());
    return out;
  }
  const auto& scale_view = fp8_scale_of(ckpt, config, t);
  std::vector<float> scales(scale_view.numel());
  scale_view.to_float(scales.data());
  t.to_float_scaled(out.data(), scales, config.quantization.block_rows,
                    config.quantization.block_cols, scale_view.name);
  return out;
}

namespace {

struct loader {
  const checkpoint_reader& ckpt;
  const model_config& c;
  precision prec;
  progress_bar& bar;
  std::mutex mutex;

  std::vector<float> read(const std::string& name, std::vector<int64_t> shape) {
    auto v = read_tensor_float(ckpt, c, name, shape);
    std::lock_guard lock(mutex);
    bar.advance(v.size());
    return v;
  }

  linear read_linear(const std::string& name, int64_t n, int64_t k) {
    auto w = read(name, {n, k});
    return linear::from_float(w.data(), n, k, prec);
  }

  mlp_weights read_mlp(const std::string& p, int64_t inter) {
    const int64_t h = c.hidden_size;
    mlp_weights m;
    m.intermediate = inter;
    auto gate = read(p + "gate_proj.weight", {inter, h});
    auto up = read(p + "up_proj.weight", {inter, h});
    gate.insert(gate.end(), up.begin(), up.end());
    m.gate_up = linear::from_float(gate.data(), 2 * inter, h, prec);
    m.down = read_linear(p + "down_proj.weight", h, inter);
    return m;
  }

  layer_weights read_layer(int64_t l) {
    const std::string p = layer_prefix(l), a = p + "self_attn.";
    const int64_t h = c.hidden_size, nh = c.num_attention_heads;
    layer_weights w;
    w.input_norm = read(p + "input_layernorm.weight", {h});
    if (c.q_lora_rank > 0) {
      w.attn.q_a = read_linear(a + "q_a_proj.weight", c.q_lora_rank, h);
      w.attn.q_a_norm = read(a + "q_a_layernorm.weight", {c.q_lora_rank});
      w.attn.q_b = read_linear(a + "q_b_proj.weight", nh * c.qk_head_dim(), c.q_lora_rank);
    } else {
      w.attn.q_b = read_linear(a + "q_proj.weight", nh * c.qk_head_dim(), h);
    }
    w.attn.kv_a =
        read_linear(a + "kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_head_dim, h);
    w.attn.kv_a_norm = read(a + "kv_a_layernorm.weight", {c.kv_lora_rank});
    const int64_t kvb_rows = nh * (c.qk_nope_head_dim + c.v_head_dim);
    w.attn.kv_b = read(a + "kv_b_proj.weight", {kvb_rows, c.kv_lora_rank});
    w.attn.kv_b_gemm = kernels::fp32_weight::pack(w.attn.kv_b.data(), kvb_rows, c.kv_lora_rank);
    w.attn.w_uv_t = kernels::mla_transpose_values(w.attn.kv_b.data(), nh, c.qk_nope_head_dim,
                                                  c.v_head_dim, c.kv_lora_rank);
    w.attn.o = read_linear(a + "o_proj.weight", h, nh * c.v_head_dim);
    w.post_attention_norm = read(p + "post_attention_layernorm.weight", {h});
    w.is_moe = c.is_moe_layer(l);
    if (!w.is_moe) {
      w.dense = read_mlp(p + "mlp.", c.intermediate_size);
      return w;
    }
    const std::string m = p + "mlp.";
    auto router = read(m + "gate.weight", {c.n_routed_experts, h});
    w.moe.router = kernels::fp32_weight::pack(router.data(), c.n_routed_experts, h);
    if (ckpt.contains(m + "gate.e_score_correction_bias"))
      w.moe.correction_bias = read(m + "gate.e_score_correction_bias", {c.n_routed_experts});
    w.moe.experts.resize(c.n_routed_experts);
    // Experts are independent: load them across the pool (kernels called inside run inline).
    kernels::thread_pool::shared().parallel_for(c.n_routed_experts, [&](int64_t e) {
      w.moe.experts[e] =
          read_mlp(m + "experts." + std::to_string(e) + ".", c.moe_intermediate_size);
    });
    if (c.n_shared_experts > 0) {
      w.moe.has_shared = true;
      w.moe.shared = read_mlp(m + "shared_experts.", c.moe_intermediate_size * c.n_shared_experts);
    }
    return w;
  }
};

size_t mlp_bytes(const mlp_weights& m) {
  return m.gate_up.bytes() + m.down.bytes();
}

size_t layer_bytes(const layer_weights& w) {
  const auto& a = w.attn;
  size_t b = a.q_a.bytes() + a.q_b.bytes() + a.kv_a.bytes() + a.kv_b.size() * 4 + a.o.bytes();
  if (!w.is_moe) return b + mlp_bytes(w.dense);
  b += w.moe.router.bytes() + (w.moe.has_shared ? mlp_bytes(w.moe.shared) : 0);
  for (auto& e : w.moe.experts) b += mlp_bytes(e);
  return b;
}

bool same_bytes(const tensor_view& a, const tensor_view& b) {
  return a.type == b.type && a.shape == b.shape && a.nbytes == b.nbytes &&
         std::memcmp(a.data, b.data, a.nbytes) == 0;
}

} // namespace

std::shared_ptr<const model_weights> model_weights::load(const std::filesystem::path& dir,
                                                         const load_options& o) {
  auto w = std::make_shared<model_weights>();
  w->config = model_config::load(dir / "config.json");
  w->prec = o.prec;
  const auto& c = w->config;
  auto ckpt = checkpoint_reader::open(dir);
  const int64_t n_mtp = o.load_mtp ? c.num_nextn_predict_layers : 0;

  // What is loaded: the main model and, optionally, the MTP modules. Every tensor of it is
  // checked against the headers before the first weight is allocated.
  model_config loaded = c;
  loaded.num_nextn_predict_layers = n_mtp;
  check_checkpoint(ckpt, loaded);
  uint64_t total = 0;
  for_each_tensor_spec(loaded, [&](const tensor_spec& s) {
    uint64_t n = 1;
    for (auto d : s.shape) n *= static_cast<uint64_t>(d);
    total += n;
  });
  progress_bar bar("loading " + dir.filename().string(), total, o.progress);
  loader ld{ckpt, c, o.prec, bar, {}};

  const int64_t h = c.hidden_size, v = c.vocab_size;
  w->embedding = std::make_shared<std::vector<float>>(ld.read("model.embed_tokens.weight", {v, h}));
  w->layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) w->layers[l] = ld.read_layer(l);
  w->final_norm = ld.read("model.norm.weight", {h});
  {
    auto head = ld.read("lm_head.weight", {v, h});
    w->lm_head = std::make_shared<linear>(linear::from_float(head.data(), v, h, o.prec));
  }
  for (int64_t i = 0; i < n_mtp; ++i) {
    const int64_t l = c.num_hidden_layers + i;
    const std::string p = layer_prefix(l);
    mtp_weights m;
    m.enorm = ld.read(p + "enorm.weight", {h});
    m.hnorm = ld.read(p + "hnorm.weight", {h});
    m.eh_proj = ld.read_linear(p + "eh_proj.weight", h, 2 * h);
    m.block = ld.read_layer(l);
    m.head_norm = ld.read(p + "shared_head.norm.weight", {h});
    const auto& emb = ckpt.get(p + "embed_tokens.weight", std::vector<int64_t>{v, h});
    if (same_bytes(emb, ckpt.get("model.embed_tokens.weight"))) {
      m.embedding = w->embedding;
      bar.advance(emb.numel());
    } else {
      m.embedding = std::make_shared<std::vector<float>>(ld.read(emb.name, {v, h}));
    }
    const auto& head = ckpt.get(p + "shared_head.head.weight", std::vector<int64_t>{v, h});
    if (same_bytes(head, ckpt.get("lm_head.weight"))) {
      m.head = w->lm_head;
      bar.advance(head.numel());
    } else {
      auto hw = ld.read(head.name, {v, h});
      m.head = std::make_shared<linear>(linear::from_float(hw.data(), v, h, o.prec));
    }
    w->mtp.push_back(std::move(m));
  }
  bar.finish();
  for (auto& l : w->layers) w->matmul_bytes += layer_bytes(l);
  w->matmul_bytes += w->lm_head->bytes();
  return w;
}

} // namespace supernode::model
