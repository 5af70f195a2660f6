#pragma once

namespace supernode::apps {
class cli_args;
// `supernode bench model-cache`: the paper's Table 2 (model caching) on this host. N instances
// (threads, each with its own seat in a generated cluster) load one model from a bandwidth-capped
// object-storage folder three ways: no cache (every instance reads the bucket), local DRAM (the
// same cold start, then a warm reload from the node's own copy) and the EMS pool (one fetch
// through the controller's claim, the rest read the pool of a real MP controller and two MP
// servers started as child processes), plus a model switch. One JSON object on stdout, a table on
// stderr.
int run_model_cache_bench(cli_args& args);
} // namespace supernode::apps
