#include "services/serving/model_store.hpp"

#include <map>
#include <mutex>

namespace supernode::services {

std::shared_ptr<const model::model_weights> shared_weights(const std::filesystem::path& dir,
                                                           model::precision precision) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, model::precision>,
                  std::weak_ptr<const model::model_weights>>
      loaded;
  std::lock_guard lock(mutex);
  auto key = std::make_pair(std::filesystem::weakly_canonical(dir).string(), precision);
  if (auto w = loaded[key].lock()) return w;
  model::load_options o;
  o.prec = precision;
  o.load_mtp = false; // serving does not speculate yet
  auto w = model::model_weights::load(dir, o);
  loaded[key] = w;
  return w;
}

} // namespace supernode::services
