#pragma once

namespace supernode::apps {
class cli_args;
// `supernode bench model`: decode step time at several batch sizes with the effective weight
// bandwidth it implies, and prefill throughput, printed as one JSON object.
int run_model_bench(cli_args& args);
} // namespace supernode::apps
