#include "model/demo_checkpoint.hpp"

#include "model/checkpoint_layout.hpp"
#include "model/progress.hpp"
#include "model/safetensors.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace supernode::model {

namespace {

const std::filesystem::path compact_relative = "training/demo-model/demo-weights.safetensors";

const tensor_view& compact_tensor(const safetensors_file& f, const std::string& name, dtype t) {
  auto it = f.tensors().find(name);
  if (it == f.tensors().end())
    throw std::runtime_error(f.path().string() + ": the demo model has no tensor '" + name + "'");
  if (it->second.type != t)
    throw std::runtime_error(f.path().string() + ": tensor '" + name + "' is " +
                             dtype_name(it->second.type) + ", expected " + dtype_name(t));
  return it->second;
}

std::vector<float> floats_of(const tensor_view& v) {
  std::vector<float> out(v.numel());
  v.to_float(out.data());
  return out;
}

// An F8_E4M3 matrix of the compact file with its `<name>_scale_inv`, one scale per block of
// `block_rows` x `block_cols`, as FP32.
std::vector<float> dequantized(const safetensors_file& f, const std::string& name,
                               int64_t block_rows, int64_t block_cols) {
  const auto& codes = compact_tensor(f, name, dtype::f8_e4m3);
  const auto scales = floats_of(compact_tensor(f, name + "_scale_inv", dtype::f32));
  std::vector<float> out(codes.numel());
  codes.to_float_scaled(out.data(), scales, block_rows, block_cols, name + "_scale_inv");
  return out;
}

// The full [vocab, hidden] table of an embedding or head: the trained rows at their token ids,
// `untrained` everywhere else, as BF16.
struct vocab_table {
  std::vector<uint16_t> bf16;

  vocab_table(const safetensors_file& f, const std::string& trained, const std::string& untrained,
              std::span<const int32_t> ids, int64_t vocab, int64_t hidden) {
    const auto rows = dequantized(f, trained, 1, hidden);
    const auto fill = floats_of(compact_tensor(f, untrained, dtype::bf16));
    if (static_cast<int64_t>(rows.size()) != static_cast<int64_t>(ids.size()) * hidden ||
        static_cast<int64_t>(fill.size()) != hidden)
      throw std::runtime_error(f.path().string() + ": '" + trained + "' or '" + untrained +
                               "' does not match vocab_ids and hidden_size");
    bf16.resize(vocab * hidden);
    for (int64_t r = 0; r < vocab; ++r)
      for (int64_t i = 0; i < hidden; ++i) bf16[r * hidden + i] = float_to_bf16(fill[i]);
    for (size_t k = 0; k < ids.size(); ++k)
      for (int64_t i = 0; i < hidden; ++i)
        bf16[ids[k] * hidden + i] = float_to_bf16(rows[k * hidden + i]);
  }
};

std::vector<int32_t> vocab_ids(const safetensors_file& f, int64_t vocab) {
  const auto& v = compact_tensor(f, "vocab_ids", dtype::i32);
  std::vector<int32_t> ids(v.numel());
  std::memcpy(ids.data(), v.data, v.nbytes);
  std::vector<bool> seen(vocab, false);
  for (auto id : ids) {
    if (id < 0 || id >= vocab || seen[id])
      throw std::runtime_error(f.path().string() + ": vocab_ids holds " + std::to_string(id) +
                               " twice or outside [0, " + std::to_string(vocab) + ")");
    seen[id] = true;
  }
  return ids;
}

std::span<const std::byte> bytes_of(const tensor_view& v) {
  return {v.data, v.nbytes};
}

} // namespace

std::filesystem::path demo_weights_path() {
  std::vector<std::filesystem::path> candidates;
  if (const char* p = std::getenv("SUPERNODE_DEMO_WEIGHTS")) candidates.emplace_back(p);
  if (const char* h = std::getenv("SUPERNODE_HOME"))
    candidates.push_back(std::filesystem::path(h) / compact_relative);
  candidates.push_back(compact_relative);
  std::string looked;
  for (auto& c : candidates) {
    if (std::filesystem::exists(c)) return c;
    looked.append(" ").append(c.string());
  }
  throw std::runtime_error("the demo model's weights are missing (looked at" + looked +
                           "); retrain them with training/demo-model/README.md's commands");
}

model_config demo_model_config(const std::filesystem::path& compact) {
  const auto f = safetensors_file::open(compact);
  auto it = f->metadata().find("config");
  if (it == f->metadata().end())
    throw std::runtime_error(compact.string() + ": no config in the metadata: not a demo model");
  auto c = model_config::from_json(nlohmann::json::parse(it->second));
  c.quantization = {true, 128, 128}; // the compact file's linears, as DeepSeek releases them
  c.validate();
  return c;
}

std::string demo_weights_digest(const std::filesystem::path& compact) {
  std::ifstream in(compact, std::ios::binary);
  uint64_t h = 0xcbf29ce484222325ull; // FNV-1a
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i)
      h = (h ^ static_cast<unsigned char>(buf[i])) * 0x100000001b3ull;
    if (!in) break;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

void write_demo_safetensors(const std::filesystem::path& compact, const model_config& c,
                            const std::filesystem::path& out, bool progress) {
  const auto f = safetensors_file::open(compact);
  const auto ids = vocab_ids(*f, c.vocab_size);
  const int64_t h = c.hidden_size;
  const vocab_table embedding(*f, "model.embed_tokens.weight", "untrained.embed_row", ids,
                              c.vocab_size, h);
  const vocab_table head(*f, "lm_head.weight", "untrained.head_row", ids, c.vocab_size, h);
  const auto specs = checkpoint_layout(c);
  safetensors_writer writer(out, checkpoint_entries(specs, c),
                            {{"format", "pt"},
                             {"generator", "supernode model make"},
                             {"preset", "demo"},
                             {"source", demo_weights_digest(compact)}});
  uint64_t total = 0;
  for (auto& s : specs) total += static_cast<uint64_t>(s.shape[0]) * s.fan_in();
  progress_bar bar("expanding the demo model", total, progress);
  std::vector<uint16_t> half;
  for (auto& s : specs) {
    if (s.role == tensor_role::embedding || s.role == tensor_role::head) {
      writer.write_next(
          std::as_bytes(std::span((s.role == tensor_role::embedding ? embedding : head).bf16)));
    } else if (stored_as_fp8(s, c)) {
      writer.write_next(bytes_of(compact_tensor(*f, s.name, dtype::f8_e4m3)));
      writer.write_next(bytes_of(compact_tensor(*f, s.name + "_scale_inv", dtype::f32)));
    } else if (s.role == tensor_role::linear || s.role == tensor_role::output_proj) {
      const auto w = dequantized(*f, s.name, 128, 128);
      half.resize(w.size());
      for (size_t i = 0; i < w.size(); ++i) half[i] = float_to_bf16(w[i]);
      writer.write_next(std::as_bytes(std::span(half)));
    } else {
      writer.write_next(bytes_of(
          compact_tensor(*f, s.name, s.role == tensor_role::gate_bias ? dtype::f32 : dtype::bf16)));
    }
    bar.advance(static_cast<uint64_t>(s.shape[0]) * s.fan_in());
  }
  writer.finish();
  bar.finish();
}

} // namespace supernode::model
