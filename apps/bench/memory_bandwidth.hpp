#pragma once
// The machine's sustained read bandwidth, measured in the same run as the figures it is
// compared with (this machine is shared and noisy; absolute numbers drift between runs).

namespace supernode::apps {
// GB/s reading a buffer of `mib` MiB with `threads` threads, best of `reps` passes.
double measure_read_bandwidth_gbs(int threads, int mib = 256, int reps = 5);
} // namespace supernode::apps
