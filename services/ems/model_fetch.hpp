#pragma once
// A role process's model through the pool (§4.4.3): before any role of the process loads its
// weights, the process joins the cluster for a moment under its first instance's name, and
// model_cache brings the model of [model] path from object storage ([ems] object_store, the
// bucket, read through its shared bandwidth cap) into a local folder — fetched once for all the
// instances starting together and read from the pool by the others. The roles then load the
// local copy, byte-identical to the bucket's.

#include "services/ems/model_cache.hpp"
#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"

#include <filesystem>

namespace supernode::services::ems {

struct model_fetch_result {
  std::filesystem::path dir; // the local copy
  model_cache_stats stats;
  double seconds = 0;
};

// The model's folder in the bucket is [model] path's folder name (the model id). Throws
// std::runtime_error naming the model when neither the pool nor object storage can supply it.
model_fetch_result fetch_model_through_pool(const transport::cluster_config& cluster,
                                            const serving_config& serving,
                                            const std::string& instance, uint64_t incarnation);

} // namespace supernode::services::ems
