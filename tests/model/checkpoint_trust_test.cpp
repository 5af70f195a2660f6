// Bad model input is refused at load with an error naming the problem, before anything is
// allocated: non-finite weights and scales (found by the conversion pass itself), config.json
// values out of bounds or disagreeing with the tensors, missing tensors, a truncated file.
// Each test corrupts one thing in a copy of the tiny checkpoint.

#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "tiny_model.hpp"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

using namespace supernode::model;
namespace fs = std::filesystem;
using supernode::testing::tiny_model_dir;

namespace {

// One copy of the tiny checkpoint for the suite; each test patches bytes of it and puts them
// back, or writes its own config.json next to a link to the copy's weights.
class checkpoint_trust : public ::testing::Test {
protected:
  static fs::path copy_dir() {
    return fs::temp_directory_path() / ("supernode-trust-" + std::to_string(::getpid()));
  }
  static fs::path weights_file() { return copy_dir() / "model.safetensors"; }

  static void SetUpTestSuite() {
    fs::remove_all(copy_dir());
    fs::create_directories(copy_dir());
    for (const char* f : {"config.json", "model.safetensors"})
      fs::copy_file(tiny_model_dir() / f, copy_dir() / f);
  }
  static void TearDownTestSuite() { fs::remove_all(copy_dir()); }

  void SetUp() override {
    config_dir_ = copy_dir() / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(config_dir_);
    fs::create_symlink(weights_file(), config_dir_ / "model.safetensors");
  }
  void TearDown() override {
    for (auto& [offset, bytes] : patched_) write_at(offset, bytes);
    fs::remove_all(config_dir_);
  }

  // Where tensor `name`'s element `index` starts in the copy's file.
  static uint64_t element_offset(const std::string& name, int64_t index) {
    std::ifstream in(weights_file(), std::ios::binary);
    uint64_t len = 0;
    in.read(reinterpret_cast<char*>(&len), 8);
    std::string header(len, '\0');
    in.read(header.data(), static_cast<std::streamsize>(len));
    auto entry = nlohmann::json::parse(header).at(name);
    const auto type = entry.at("dtype").get<std::string>();
    const uint64_t size = type == "F32" ? 4 : type == "BF16" ? 2 : 1;
    return 8 + len + entry.at("data_offsets")[0].get<uint64_t>() + size * index;
  }

  static std::string read_at(uint64_t offset, size_t n) {
    std::ifstream in(weights_file(), std::ios::binary);
    in.seekg(static_cast<std::streamoff>(offset));
    std::string bytes(n, '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(n));
    return bytes;
  }
  static void write_at(uint64_t offset, const std::string& bytes) {
    std::fstream out(weights_file(), std::ios::binary | std::ios::in | std::ios::out);
    out.seekp(static_cast<std::streamoff>(offset));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  // Overwrites element `index` of tensor `name` with `value`'s bytes, restored after the test.
  template<class T>
  void patch(const std::string& name, int64_t index, T value) {
    const uint64_t at = element_offset(name, index);
    patched_.emplace_back(at, read_at(at, sizeof(T)));
    std::string bytes(sizeof(T), '\0');
    std::memcpy(bytes.data(), &value, sizeof(T));
    write_at(at, bytes);
  }

  // config.json of the tiny model with `edit` applied, next to the copy's weights.
  template<class F>
  fs::path with_config(F&& edit) {
    std::ifstream in(copy_dir() / "config.json");
    auto j = nlohmann::json::parse(in);
    edit(j);
    std::ofstream(config_dir_ / "config.json") << j.dump(2);
    return config_dir_;
  }
  fs::path unchanged() {
    return with_config([](nlohmann::json&) {});
  }

  static std::string load_error(const fs::path& dir) {
    try {
      model_weights::load(dir);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  fs::path config_dir_;
  std::vector<std::pair<uint64_t, std::string>> patched_;
};

#define EXPECT_CONTAINS(haystack, needle)                                                          \
  EXPECT_NE((haystack).find(needle), std::string::npos) << "missing \"" << (needle) << "\" in\n"   \
                                                        << (haystack)

} // namespace

TEST_F(checkpoint_trust, nan_in_a_bf16_weight_names_the_tensor_and_index) {
  patch<uint16_t>("model.layers.0.input_layernorm.weight", 5, 0x7FC0); // BF16 quiet NaN
  auto msg = load_error(unchanged());
  EXPECT_CONTAINS(msg, "model.safetensors");
  EXPECT_CONTAINS(msg, "'model.layers.0.input_layernorm.weight' (BF16 [256])");
  EXPECT_CONTAINS(msg, "NaN at index 5 [5]");
}

TEST_F(checkpoint_trust, nan_in_an_fp8_weight_names_the_tensor_and_index) {
  // Row 2, column 3 of q_a_proj [128, 256]; 0xFF is E4M3's negative NaN.
  patch<uint8_t>("model.layers.0.self_attn.q_a_proj.weight", 2 * 256 + 3, 0xFF);
  auto msg = load_error(unchanged());
  EXPECT_CONTAINS(msg, "'model.layers.0.self_attn.q_a_proj.weight' (F8_E4M3 [128, 256])");
  EXPECT_CONTAINS(msg, "NaN at index 515 [2, 3]");
}

TEST_F(checkpoint_trust, infinity_in_an_f32_weight_is_refused) {
  // The first MoE layer's routing bias, stored as F32.
  patch<float>("model.layers.1.mlp.gate.e_score_correction_bias", 9,
               -std::numeric_limits<float>::infinity());
  auto msg = load_error(unchanged());
  EXPECT_CONTAINS(msg, "'model.layers.1.mlp.gate.e_score_correction_bias' (F32 [64])");
  EXPECT_CONTAINS(msg, "-Inf at index 9 [9]");
}

TEST_F(checkpoint_trust, infinity_in_a_scale_names_the_scale_tensor) {
  patch<float>("model.layers.0.self_attn.q_a_proj.weight_scale_inv", 1,
               std::numeric_limits<float>::infinity());
  auto msg = load_error(unchanged());
  EXPECT_CONTAINS(msg, "'model.layers.0.self_attn.q_a_proj.weight_scale_inv' (F32 [1, 2])");
  EXPECT_CONTAINS(msg, "+Inf at index 1 [0, 1]");
}

TEST_F(checkpoint_trust, a_finite_scale_that_overflows_the_weight_is_refused) {
  // 3e38 is finite, but times E4M3 values of up to 448 it is not: every weight of the block
  // that is not zero overflows, found by the pass that applies the scales.
  patch<float>("model.layers.0.self_attn.q_a_proj.weight_scale_inv", 0, 3e38f);
  auto msg = load_error(unchanged());
  EXPECT_CONTAINS(msg, "'model.layers.0.self_attn.q_a_proj.weight' (F8_E4M3 [128, 256]) "
                       "dequantized with 'model.layers.0.self_attn.q_a_proj.weight_scale_inv' "
                       "holds ");
  EXPECT_CONTAINS(msg, "Inf at index");
}

TEST_F(checkpoint_trust, a_million_layers_are_refused_naming_the_field_at_once) {
  auto dir = with_config([](nlohmann::json& j) { j["num_hidden_layers"] = 1000000; });
  const auto start = std::chrono::steady_clock::now();
  auto msg = load_error(dir);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_CONTAINS(msg, "config.json");
  EXPECT_CONTAINS(msg, "'num_hidden_layers' = 1000000 is out of range [1, 1024]");
  // A bound, not synchronisation: the landed loader took 15 s to fail with a bad_alloc.
  EXPECT_LT(took, std::chrono::seconds(1));
}

TEST_F(checkpoint_trust, a_field_disagreeing_with_a_tensor_names_both_shapes) {
  struct mismatch {
    const char* field;
    int64_t value;
    std::string expected; // in the message
  };
  for (const auto& m : std::vector<mismatch>{
           {"hidden_size", 128,
            "'model.embed_tokens.weight' has shape [129280, 256] but config.json's hidden_size = "
            "128 implies [129280, 128]"},
           {"vocab_size", 1000,
            "'model.embed_tokens.weight' has shape [129280, 256] but config.json's vocab_size = "
            "1000 implies [1000, 256]"},
           {"num_attention_heads", 8,
            "'model.layers.0.self_attn.q_b_proj.weight' has shape [192, 128] but config.json's "
            "num_attention_heads * (qk_nope_head_dim + qk_rope_head_dim) = 384 implies [384, 128]"},
           {"n_routed_experts", 128,
            "'model.layers.1.mlp.gate.weight' has shape [64, 256] but config.json's "
            "n_routed_experts = 128 implies [128, 256]"},
           {"moe_intermediate_size", 64,
            "'model.layers.1.mlp.experts.0.gate_proj.weight' has shape [128, 256] but "
            "config.json's moe_intermediate_size = 64 implies [64, 256]"},
       }) {
    auto dir = with_config([&](nlohmann::json& j) { j[m.field] = m.value; });
    const auto start = std::chrono::steady_clock::now();
    auto msg = load_error(dir);
    EXPECT_CONTAINS(msg, m.expected);
    EXPECT_CONTAINS(msg, "model.safetensors");
    // Found in the headers before any weight is read.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1)) << m.field;
  }
}

TEST_F(checkpoint_trust, a_tensor_the_config_implies_but_the_file_lacks_is_named) {
  // Two dense layers: layer 1 now needs a dense MLP the checkpoint does not have.
  auto dir = with_config([](nlohmann::json& j) { j["first_k_dense_replace"] = 2; });
  auto msg = load_error(dir);
  EXPECT_CONTAINS(msg, "missing tensor 'model.layers.1.mlp.gate_proj.weight'");
}

TEST_F(checkpoint_trust, a_truncated_weights_file_is_refused_naming_the_tensor) {
  const auto size = fs::file_size(weights_file());
  const auto tail = read_at(size - 5, 5);
  fs::resize_file(weights_file(), size - 5);
  auto msg = load_error(unchanged());
  write_at(size - 5, tail); // the copy whole again for the other tests
  // The data is written in layout order, so the last tensor is the one cut short.
  EXPECT_CONTAINS(msg, "model.safetensors: tensor 'lm_head.weight' offsets");
  EXPECT_CONTAINS(msg, "overrun the data section");
}

TEST_F(checkpoint_trust, the_untouched_copy_loads) {
  // The corruptions above are the only reason the loads fail: the restored copy loads.
  EXPECT_EQ(load_error(unchanged()), "");
}
