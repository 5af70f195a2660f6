#pragma once
// The tiny checkpoint made by the `make_tiny_model` ctest fixture, loaded once per process.

#include "model/weights.hpp"

#include <filesystem>
#include <map>
#include <memory>

namespace supernode::testing {

inline std::filesystem::path tiny_model_dir() {
  return std::filesystem::path(SUPERNODE_TEST_MODEL_DIR) / "tiny";
}

inline std::shared_ptr<const model::model_weights> tiny_weights(model::precision p) {
  static std::map<model::precision, std::shared_ptr<const model::model_weights>> cache;
  auto& w = cache[p];
  if (!w) {
    model::load_options o;
    o.prec = p;
    w = model::model_weights::load(tiny_model_dir(), o);
  }
  return w;
}

// A fixed pseudo-random prompt over the whole vocabulary.
inline std::vector<int32_t> test_prompt(int64_t n, int64_t salt = 0) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<int32_t>((i * 7919 + salt * 104729 + 17) % 129000 + 2);
  return p;
}

} // namespace supernode::testing
