#include "services/serving/model_store.hpp"

#include <map>
#include <mutex>
#include <tuple>

namespace supernode::services {

std::shared_ptr<const model::model_weights>
shared_weights(const std::filesystem::path& dir, model::precision precision, bool with_mtp) {
  static std::mutex mutex;
  static std::map<std::tuple<std::string, model::precision, bool>,
                  std::weak_ptr<const model::model_weights>>
      loaded;
  std::lock_guard lock(mutex);
  auto key = std::make_tuple(std::filesystem::weakly_canonical(dir).string(), precision, with_mtp);
  if (auto w = loaded[key].lock()) return w;
  model::load_options o;
  o.prec = precision;
  o.load_mtp = with_mtp;
  auto w = model::model_weights::load(dir, o);
  loaded[key] = w;
  return w;
}

} // namespace supernode::services
