#pragma once

namespace supernode::apps {
class cli_args;
// `supernode bench mtp`: speculative decoding with the MTP module on the reference engine, per
// batch size and draft depth: acceptance, mean accepted length (tokens per sequence-step), time
// per output token, decode throughput and its gain over no drafts, all measured in one run, and
// the depth the adaptive rule (services/decode/mtp_depth.hpp) picks from those figures at each
// batch. Every depth's greedy tokens are checked against depth 0's.
int run_mtp_bench(cli_args& args);
} // namespace supernode::apps
