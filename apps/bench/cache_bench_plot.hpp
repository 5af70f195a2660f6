#pragma once
// `bench cache`'s plot: prefill throughput and mean TTFT against the token reuse rate, a line
// per EMS read path, as an SVG of two panels.

#include "apps/bench/cache_bench_sweep.hpp"

#include <string>
#include <utility>
#include <vector>

namespace supernode::apps {

using cache_bench_results = std::vector<std::pair<std::string, std::vector<rate_point>>>;

std::string render_cache_bench_svg(const cache_bench_options& o, const std::string& model_id,
                                   const cache_bench_results& results);

} // namespace supernode::apps
