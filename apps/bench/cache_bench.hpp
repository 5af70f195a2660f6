#pragma once

namespace supernode::apps {
class cli_args;
// `supernode bench cache`: the context-cache reuse sweep of the paper's Figure 23. For each EMS
// read path (UB, VPC) it brings up a real multi-process PDC cluster with the pool and the cache
// on, and for each token reuse rate sends prompts sharing a prefix the pool already holds; it
// prints prefill throughput, TTFT and the reuse the prefill instance measured as JSON, and draws
// throughput and TTFT against the reuse rate in an SVG.
int run_cache_bench(cli_args& args);
} // namespace supernode::apps
