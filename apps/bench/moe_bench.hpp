#pragma once

namespace supernode::apps {
class cli_args;
// `supernode bench moe`: FusedDispatch/FusedCombine latency and per-rank bandwidth against the
// EP degree over shared memory and over ZeroMQ (the paper's Table 7, UB versus RDMA), decode
// throughput with microbatch pipelining on and off, and EPLB on a skewed workload; one JSON
// object on stdout.
int run_moe_bench(cli_args& args);
} // namespace supernode::apps
