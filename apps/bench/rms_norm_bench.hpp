#pragma once
// `supernode bench kernels --rms-norm`: RMSNorm on every kernel path the CPU has, one thread,
// the paths alternated call by call on the same rows (a decode's one row, eight, a prefill's
// 512), so the ratios come from the same minutes of a shared host.

#include <nlohmann/json.hpp>

namespace supernode::apps {

nlohmann::json rms_norm_report(int rounds);

} // namespace supernode::apps
