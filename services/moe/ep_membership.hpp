#pragma once
// Which expert-parallel group an instance belongs to, read off the cluster and serving config
// every process shares: consecutive decode instances form groups of [ep] decode_ranks ranks
// (decode-0..3 are one decode instance of 4 ranks), prefill instances groups of prefill_ranks
// (a prefill step of up to the token budget is one op per MoE layer), and expert_shard instances
// are spread evenly over the decode groups as extra ranks that host the experts (the attention
// ranks then host none). Ranks that join beyond the config (`role decode --join`) form groups of
// their own by the number in their names: with decode_ranks = 2 and decode-0..1 configured,
// decode-2 and decode-3 are the second group. The fabric follows the dispatch flow's plane:
// shared memory for shm and inproc planes, ZeroMQ for zmq planes (configured ranks only).

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
  // Expert shards that join the live cluster beyond the config (`role experts --join`) are
  // taken in as expert hosts: in the one decode group of an attention/MoE split over shared
  // memory (a joined shard has no configured fabric address, and with several groups nobody
  // could say whose it is).
  bool takes_joined_shards = false;

  std::string describe() const; // "decode-ep0 rank 1 of 4 (decode-0..., experts on ...)"
};

// A group re-forms when a member dies or comes back: the formation over the members alive now,
// named by its epoch (a hash of their names and incarnations), so every survivor that sees the
// same members computes the same group, and no two formations share a region or a socket.
struct ep_formation {
  std::string epoch;
  ep_membership membership; // ranks renumbered over the alive members, in config order
};

// `alive`: (instance, incarnation) of the members alive now, this instance among them: the
// configured ones, and joined expert shards when the group takes them. Attention ranks keep
// their configured order; the expert hosts follow, by the number in their names, so every rank
// numbers a formation alike whichever shards its config listed. Throws std::runtime_error when
// `alive` lacks this instance, or an attention/MoE split has no expert shard left.
ep_formation formed_over(const ep_membership& configured,
                         const std::vector<std::pair<std::string, uint64_t>>& alive,
                         const model::model_config& model, model::precision prec);

// Whether `name` is an expert shard's instance name ("expert_shard-4").
bool is_expert_shard_name(const std::string& name);

// Nothing when the instance runs its experts itself (a group of one). Throws
// std::runtime_error naming the mismatch when the config cannot form groups. The group logs as
// `log` (the instance's logger).
std::optional<ep_membership> ep_membership_of(const transport::cluster_config& cluster,
                                              const serving_config& serving,
                                              const transport::instance_config& instance,
                                              const model::model_config& model,
                                              model::precision prec, const log::logger& log);

} // namespace supernode::services
