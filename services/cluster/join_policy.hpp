#pragma once
// Which processes may join a live cluster (`supernode role KIND --join ...`): one role instance
// per process, and a role whose instances stand alone: a prefill or decode instance outside an
// expert-parallel group, or an MP server (the controller hands it its blocks as it joins the EMS
// ring). Groups take members only as the config lists them, for now. The supervisor asks it before planning slots past the config's, `role --join` before
// it starts, and the planner before it plans past the slots.

#include "transport/cluster_config.hpp"

#include <cstdint>
#include <string>

namespace supernode::services::cluster {

// Why a process of kind `process` cannot join, or "" when it can. `decode_ranks` and
// `prefill_ranks` are [ep]'s: ranks per instance.
std::string join_refusal(const transport::cluster_config& cluster, int32_t decode_ranks,
                         int32_t prefill_ranks, const std::string& process);

} // namespace supernode::services::cluster
