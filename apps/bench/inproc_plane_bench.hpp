#pragma once
#include <nlohmann/json.hpp>

namespace supernode::apps {
// Round trip and hand-off rate of the inproc plane (object hand-off, no copy) in one process.
nlohmann::json run_inproc_plane_bench(bool quick);
} // namespace supernode::apps
