#pragma once
// `supernode bench kernels --expert-stream`: how fast a decode step's routed experts stream
// their weights from memory through the grouped INT8 GEMM, against one large matrix (lm_head)
// streamed by the plain GEMM in the same rounds. At batch 1 both are bound by weight reads,
// so the ratio shows what the grouped scheduler loses on many small matrices.

#include "kernels/thread_pool.hpp"

#include <nlohmann/json.hpp>

namespace supernode::apps {

nlohmann::json expert_stream_report(kernels::thread_pool& pool, int rounds);

} // namespace supernode::apps
