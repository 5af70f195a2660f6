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
