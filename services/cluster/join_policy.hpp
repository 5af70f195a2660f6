#pragma once
// Which processes may join a live cluster (`supernode role KIND --join ...`): one role instance
// per process, and a role whose instances stand alone or form groups of their own: a prefill or
// decode instance (outside an expert-parallel group, or as a rank of a new group, whole groups
// at a time, when the group's ranks meet over shared memory: services/moe/ep_membership.hpp), an
// MP server (the controller hands it its blocks as it joins the EMS ring), or an expert shard of
// the one decode group of an attention/MoE split over shared memory (it joins the group as one
// more expert host). Groups with expert shards take attention ranks only as the config lists
// them. The supervisor asks it before planning slots past the config's, `role --join` before it
// starts, and the planner before it plans past the slots.
//
// A process may also switch, in place, between serving a prefill and a decode instance (same
// process, same model copy: `role KIND --as ROLE` at start, or a role-switch signal while it
// runs). The instance it switches to is a joined one, so both kinds must be able to join.

#include "transport/cluster_config.hpp"

#include <cstdint>
#include <string>

namespace supernode::services::cluster {

// Why a process of kind `process` cannot join, or "" when it can. `decode_ranks` and
// `prefill_ranks` are [ep]'s: ranks per instance.
std::string join_refusal(const transport::cluster_config& cluster, int32_t decode_ranks,
                         int32_t prefill_ranks, const std::string& process);

// Ranks of one group that processes of kind `process` join as: [ep] decode_ranks or
// prefill_ranks for a prefill or decode kind, 1 for any other. A scale past the config's slots
// adds whole groups.
int32_t join_group_ranks(const transport::cluster_config& cluster, int32_t decode_ranks,
                         int32_t prefill_ranks, const std::string& process);

// The process kind whose processes serve `role` alone ("decode"), or "" when none does.
std::string kind_serving(const transport::cluster_config& cluster, const std::string& role);

// Why a process of kind `process` cannot serve `role` in place of its own, or "" when it can.
std::string switch_refusal(const transport::cluster_config& cluster, int32_t decode_ranks,
                           int32_t prefill_ranks, const std::string& process,
                           const std::string& role);

// The members a process beyond the config joins through, comma-separated: the config's
// schedulers and gateways, whichever answers first.
std::string default_join_seeds(const transport::cluster_config& cluster);

} // namespace supernode::services::cluster
