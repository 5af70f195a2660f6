#pragma once
// The checkpoints the `make_tiny_model` and `make_demo_model` ctest fixtures make, loaded once
// per process: tiny is seeded noise, demo the model trained in training/demo-model/.

#include "model/weights.hpp"

#include <filesystem>
#include <map>
#include <memory>

namespace supernode::testing {

inline std::filesystem::path tiny_model_dir() {
  return std::filesystem::path(SUPERNODE_TEST_MODEL_DIR) / "tiny";
}

inline std::filesystem::path demo_model_dir() {
  return std::filesystem::path(SUPERNODE_TEST_MODEL_DIR) / "demo";
}

inline std::shared_ptr<const model::model_weights>
test_model_weights(const std::filesystem::path& dir, model::precision p) {
  static std::map<std::pair<std::filesystem::path, model::precision>,
                  std::shared_ptr<const model::model_weights>>
      cache;
  auto& w = cache[{dir, p}];
  if (!w) {
    model::load_options o;
    o.prec = p;
    w = model::model_weights::load(dir, o);
  }
  return w;
}

inline std::shared_ptr<const model::model_weights> tiny_weights(model::precision p) {
  return test_model_weights(tiny_model_dir(), p);
}

inline std::shared_ptr<const model::model_weights> demo_weights(model::precision p) {
  return test_model_weights(demo_model_dir(), p);
}

// A fixed pseudo-random prompt over the whole vocabulary.
inline std::vector<int32_t> test_prompt(int64_t n, int64_t salt = 0) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<int32_t>((i * 7919 + salt * 104729 + 17) % 129000 + 2);
  return p;
}

} // namespace supernode::testing
