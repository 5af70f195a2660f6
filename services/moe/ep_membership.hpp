#pragma once
// Which expert-parallel group an instance belongs to, read off the cluster and serving config
// every process shares: consecutive decode instances form groups of [ep] decode_ranks ranks
// (decode-0..3 are one decode instance of 4 ranks), prefill instances groups of prefill_ranks
// (a prefill step of up to the token budget is one op per MoE layer), and expert_shard instances
// are spread evenly over the decode groups as extra ranks that host the experts (the attention
// ranks then host none). The fabric follows the dispatch flow's plane: shared memory for shm and
// inproc planes, ZeroMQ for zmq planes.

#include "services/moe/expert_parallel.hpp"
#include "services/serving/serving_config.hpp"
#include "transport/cluster_config.hpp"
#include "transport/rank_fabric.hpp"

#include <optional>
#include <string>
#include <vector>

namespace supernode::services {

struct ep_membership {
  std::vector<std::string> members; // instance names by rank
  std::string fabric_kind;          // shm | zmq
  transport::rank_fabric_options fabric;
  ep_options options;

  std::string describe() const; // "decode-ep0 rank 1 of 4 (decode-0..., experts on ...)"
};

// Nothing when the instance runs its experts itself (a group of one). Throws
// std::runtime_error naming the mismatch when the config cannot form groups. The group logs as
// `log` (the instance's logger).
std::optional<ep_membership> ep_membership_of(const transport::cluster_config& cluster,
                                              const serving_config& serving,
                                              const transport::instance_config& instance,
                                              const model::model_config& model,
                                              model::precision prec, const log::logger& log);

} // namespace supernode::services
