#include "model/checkpoint_layout.hpp"
#include "model/checkpoint_maker.hpp"
#include "model/demo_checkpoint.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "tiny_model.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <unistd.h>

using namespace supernode::model;
namespace fs = std::filesystem;
using supernode::testing::tiny_model_dir;

namespace {
std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

fs::path scratch_dir(const std::string& name) {
  auto d =
      fs::temp_directory_path() / ("supernode-ckpt-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(d);
  return d;
}
} // namespace

TEST(checkpoint_maker, writes_the_released_format) {
  auto dir = tiny_model_dir();
  ASSERT_TRUE(fs::exists(dir / "tokenizer.json"));
  ASSERT_TRUE(fs::exists(dir / "tokenizer_config.json"));
  auto config = model_config::load(dir / "config.json");
  auto ckpt = checkpoint_reader::open(dir);
  for (auto& spec : checkpoint_layout(config)) {
    const auto& t = ckpt.get(spec.name, spec.shape);
    if (spec.role == tensor_role::linear || spec.role == tensor_role::output_proj) {
      EXPECT_EQ(t.type, dtype::f8_e4m3) << spec.name;
      EXPECT_TRUE(ckpt.contains(spec.name + "_scale_inv")) << spec.name;
    } else if (spec.role == tensor_role::gate_bias) {
      EXPECT_EQ(t.type, dtype::f32);
    } else {
      EXPECT_EQ(t.type, dtype::bf16) << spec.name;
    }
  }
  EXPECT_TRUE(ckpt.contains("model.layers.4.eh_proj.weight")); // the MTP module
  EXPECT_TRUE(ckpt.contains("model.layers.1.mlp.experts.63.down_proj.weight"));
}

TEST(checkpoint_maker, is_deterministic_for_a_seed) {
  auto again = scratch_dir("seed1"), other = scratch_dir("seed2");
  make_options o;
  o.preset = "tiny";
  o.seed = 1;
  o.out = again;
  o.progress = false;
  o.tokenizer_dir = SUPERNODE_TOKENIZER_DIR;
  make_checkpoint(o);
  EXPECT_TRUE(file_bytes(again / "model.safetensors") ==
              file_bytes(tiny_model_dir() / "model.safetensors"));
  EXPECT_EQ(file_bytes(again / "config.json"), file_bytes(tiny_model_dir() / "config.json"));
  o.seed = 2;
  o.out = other;
  make_checkpoint(o);
  EXPECT_FALSE(file_bytes(other / "model.safetensors") ==
               file_bytes(tiny_model_dir() / "model.safetensors"));
  fs::remove_all(again);
  fs::remove_all(other);
}

TEST(checkpoint_maker, loader_names_a_missing_tensor_and_a_wrong_shape) {
  auto dir = scratch_dir("broken");
  fs::create_directories(dir);
  fs::copy_file(tiny_model_dir() / "config.json", dir / "config.json");
  auto config = model_config::load(dir / "config.json");
  const int64_t v = config.vocab_size, h = config.hidden_size;
  {
    // Only the embedding: the first layer's norm is the first thing missing.
    safetensors_writer w(dir / "model.safetensors",
                         {{"model.embed_tokens.weight", dtype::bf16, {v, h}}});
    std::vector<uint16_t> zeros(v * h, 0);
    w.write_next(std::as_bytes(std::span(zeros)));
    w.finish();
  }
  try {
    model_weights::load(dir);
    ADD_FAILURE() << "loaded a checkpoint without layers";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.layers.0.input_layernorm.weight'"),
              std::string::npos)
        << e.what();
  }
  {
    safetensors_writer w(dir / "model.safetensors",
                         {{"model.embed_tokens.weight", dtype::bf16, {v, h + 1}}});
    std::vector<uint16_t> zeros(v * (h + 1), 0);
    w.write_next(std::as_bytes(std::span(zeros)));
    w.finish();
  }
  try {
    model_weights::load(dir);
    ADD_FAILURE() << "loaded an embedding of the wrong width";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.embed_tokens.weight' has shape"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(checkpoint_maker, bf16_and_fp8_checkpoints_load_alike) {
  // The FP8 file stores the same random weights through E4M3 blocks: loading dequantizes them,
  // so every weight is within E4M3's relative step of the BF16 file's.
  auto dir = scratch_dir("bf16");
  make_options o;
  o.preset = "tiny";
  o.seed = 1;
  o.out = dir;
  o.fp8 = false;
  o.progress = false;
  o.tokenizer_dir = SUPERNODE_TOKENIZER_DIR;
  make_checkpoint(o);
  auto a = checkpoint_reader::open(dir), b = checkpoint_reader::open(tiny_model_dir());
  auto config = model_config::load(tiny_model_dir() / "config.json");
  auto plain = model_config::load(dir / "config.json");
  const std::string name = "model.layers.1.mlp.experts.3.up_proj.weight";
  auto wa = read_tensor_float(a, plain, name, {config.moe_intermediate_size, config.hidden_size});
  auto wb = read_tensor_float(b, config, name, {config.moe_intermediate_size, config.hidden_size});
  float amax = 0;
  for (auto x : wa) amax = std::max(amax, std::fabs(x));
  for (size_t i = 0; i < wa.size(); ++i)
    EXPECT_NEAR(wa[i], wb[i], std::max(std::fabs(wa[i]) * 0.07f, amax * 0.004f)) << i;
  fs::remove_all(dir);
}

TEST(checkpoint_maker, ensure_checkpoint_keeps_what_matches_and_remakes_the_rest) {
  ::setenv("SUPERNODE_TOKENIZER_DIR", SUPERNODE_TOKENIZER_DIR, 1);
  ::setenv(
      "SUPERNODE_DEMO_WEIGHTS",
      (fs::path(SUPERNODE_SOURCE_DIR) / "training/demo-model/demo-weights.safetensors").c_str(), 1);
  const auto dir = scratch_dir("ensure");
  ensure_checkpoint(dir, "tiny", 1);
  const auto made = fs::last_write_time(dir / "model.safetensors");
  const auto seed1 = file_bytes(dir / "model.safetensors");
  ensure_checkpoint(dir, "tiny", 1);
  EXPECT_EQ(fs::last_write_time(dir / "model.safetensors"), made) << "a matching folder is kept";
  ensure_checkpoint(dir, "tiny", 2);
  EXPECT_NE(file_bytes(dir / "model.safetensors"), seed1) << "another seed is remade";
  // A folder of seeded noise where the demo model belongs (models/demo before the trained one).
  ensure_checkpoint(dir, "demo", 1);
  auto file = safetensors_file::open(dir / "model.safetensors");
  EXPECT_EQ(file->metadata().at("preset"), "demo");
  EXPECT_EQ(file->metadata().at("source"), demo_weights_digest(demo_weights_path()));
  fs::remove_all(dir);
}
