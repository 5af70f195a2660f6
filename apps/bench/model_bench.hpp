#pragma once

#include <cstdint>
#include <vector>

namespace supernode::apps {
class cli_args;
// The benchmarks' prompt of `n` tokens: ids spread over the vocabulary, varied by `salt`.
std::vector<int32_t> synthetic_prompt(int64_t n, int64_t vocab, int64_t salt);

// `supernode bench model`: decode step time at several batch sizes with the effective weight
// bandwidth it implies, and prefill throughput, printed as one JSON object.
int run_model_bench(cli_args& args);
} // namespace supernode::apps
