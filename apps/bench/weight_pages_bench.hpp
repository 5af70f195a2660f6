#pragma once
// `supernode bench model --weight-pages`: one FP32 GEMV (M = 1, the lm_head of `small`, 530 MB
// streamed from memory) on the same packed weights held twice in one process, in 4 KB pages
// and in huge pages (kernels/weight_memory.hpp), timed alternately; the figure behind the
// huge-page advice for weights.

#include <nlohmann/json.hpp>

namespace supernode::apps {

nlohmann::json weight_pages_report(int repetitions);

} // namespace supernode::apps
