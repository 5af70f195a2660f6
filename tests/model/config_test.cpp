#include "model/checkpoint_maker.hpp"
#include "model/config.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace supernode::model;

namespace {
std::string error_of(const nlohmann::json& j) {
  try {
    model_config::from_json(j);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
} // namespace

TEST(config, presets_round_trip_through_hf_json) {
  for (const char* preset : {"tiny", "small"}) {
    auto c = preset_config(preset);
    auto back = model_config::from_json(c.to_json());
    EXPECT_EQ(back.to_json(), c.to_json()) << preset;
    EXPECT_EQ(back.vocab_size, 129280);
    EXPECT_EQ(back.n_routed_experts, 64);
    EXPECT_EQ(back.num_experts_per_tok, 8);
    EXPECT_EQ(back.n_group, 8);
    EXPECT_EQ(back.topk_group, 4);
    EXPECT_TRUE(back.quantization.enabled);
  }
  // The small preset is the "about a billion parameters" benchmark model.
  auto n = preset_config("small").parameter_count();
  EXPECT_GT(n, 800'000'000);
  EXPECT_LT(n, 1'400'000'000);
}

TEST(config, yarn_softmax_scale_matches_hf) {
  auto c = preset_config("tiny");
  // HF: qk_head_dim^-0.5 * (0.1 * mscale_all_dim * ln(factor) + 1)^2
  double m = 0.1 * 1.0 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c.softmax_scale(), 1.0 / std::sqrt(48.0) * m * m, 1e-12);
}

TEST(config, missing_and_inconsistent_fields_are_named) {
  auto j = preset_config("tiny").to_json();
  auto k = j;
  k.erase("hidden_size");
  EXPECT_NE(error_of(k).find("'hidden_size'"), std::string::npos);
  k = j;
  k["n_group"] = 7;
  EXPECT_NE(error_of(k).find("n_group"), std::string::npos);
  k = j;
  k["qk_rope_head_dim"] = 15;
  EXPECT_NE(error_of(k).find("qk_rope_head_dim"), std::string::npos);
  k = j;
  k["hidden_size"] = "wide";
  EXPECT_NE(error_of(k).find("'hidden_size' has the wrong type"), std::string::npos);
  k = j;
  k["quantization_config"]["quant_method"] = "gptq";
  EXPECT_NE(error_of(k).find("gptq"), std::string::npos);
  EXPECT_THROW(preset_config("huge"), std::invalid_argument);
}

TEST(config, values_out_of_bounds_name_the_field_value_and_range) {
  const auto j = preset_config("tiny").to_json();
  struct bad {
    const char* field;
    nlohmann::json value;
    const char* expected;
  };
  for (const auto& b : std::vector<bad>{
           {"num_hidden_layers", 1000000,
            "'num_hidden_layers' = 1000000 is out of range [1, 1024]"},
           {"num_hidden_layers", 0, "'num_hidden_layers' = 0 is out of range [1, 1024]"},
           {"vocab_size", int64_t{1} << 40, "'vocab_size' = 1099511627776 is out of range"},
           {"hidden_size", -4, "'hidden_size' = -4 is out of range [1, 65536]"},
           {"num_attention_heads", 5000, "'num_attention_heads' = 5000 is out of range"},
           {"n_routed_experts", 100000, "'n_routed_experts' = 100000 is out of range [0, 4096]"},
           {"num_experts_per_tok", 65, "'num_experts_per_tok' = 65 is out of range [1, 64]"},
           {"v_head_dim", 0, "'v_head_dim' = 0 is out of range [1, 4096]"},
           {"max_position_embeddings", 0, "'max_position_embeddings' = 0 is out of range"},
           {"eos_token_id", 129280, "'eos_token_id' = 129280 is out of range [0, 129279]"},
           {"first_k_dense_replace", 5, "'first_k_dense_replace' = 5 is out of range [0, 4]"},
           {"rms_norm_eps", 0.0, "'rms_norm_eps' = 0 is out of range"},
           {"num_hidden_layers", 1e30, "'num_hidden_layers' has the wrong type"},
       }) {
    auto k = j;
    k[b.field] = b.value;
    EXPECT_NE(error_of(k).find(b.expected), std::string::npos) << b.field << ": " << error_of(k);
  }
  auto k = j;
  k["rope_scaling"]["factor"] = 0.5;
  EXPECT_NE(error_of(k).find("'rope_scaling.factor' = 0.5 is out of range [1, 10000]"),
            std::string::npos)
      << error_of(k);
  k = j;
  k["quantization_config"]["weight_block_size"] = {0, 128};
  EXPECT_NE(error_of(k).find("'quantization_config.weight_block_size[0]' = 0"), std::string::npos)
      << error_of(k);
}
