#pragma once

namespace supernode::apps {
class cli_args;
// `supernode bench serve`: load an OpenAI-compatible server with streamed completions (vLLM's
// benchmark_serving.py in spirit) and print TTFT/TPOT/ITL/E2E and throughput as JSON.
int run_serve_bench(cli_args& args);
} // namespace supernode::apps
