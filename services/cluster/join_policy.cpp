#include "services/cluster/join_policy.hpp"

#include <algorithm>

namespace supernode::services::cluster {

namespace {

// Expert shards join as extra expert hosts of the one decode group of an attention/MoE split
// whose ranks meet over shared memory (services/moe/ep_membership.hpp says why).
std::string shard_join_refusal(const transport::cluster_config& cluster, int32_t decode_ranks,
                               const std::string& what) {
  int32_t decode_instances = 0;
  for (auto& i : cluster.instances()) decode_instances += i.role == "decode";
  if (decode_instances != decode_ranks)
    return what + "its shards serve " +
           std::to_string(decode_instances / std::max(1, decode_ranks)) +
           " decode groups, and a joined shard would belong to none of them";
  if (cluster.plane_for_flow("dispatch").kind == "zmq")
    return what + "its group's ranks meet over ZeroMQ at configured addresses, which a joined " +
           "shard has none of";
  return "";
}

} // namespace

std::string join_refusal(const transport::cluster_config& cluster, int32_t decode_ranks,
                         int32_t prefill_ranks, const std::string& process) {
  const transport::process_config* kind = nullptr;
  for (auto& p : cluster.processes)
    if (p.name == process) kind = &p;
  if (!kind) return "no process '" + process + "' in cluster '" + cluster.name + "'";
  const std::string what = "process '" + process + "' cannot join at run time: ";
  if (kind->roles.size() != 1 || kind->per_process != 1)
    return what + "it hosts more than one role instance (joins take one per process)";
  const auto& role = kind->roles.front();
  if (role == "expert_shard") return shard_join_refusal(cluster, decode_ranks, what);
  if (role != "prefill" && role != "decode" && role != "mp_server")
    return what + "its role '" + role + "' takes members only as the config lists them (joins " +
           "take prefill, decode, mp_server and expert_shard instances)";
  bool shards = false;
  for (auto& i : cluster.instances()) shards |= role == "decode" && i.role == "expert_shard";
  if (shards)
    return what + "its " + role + " instances form expert-parallel groups with expert shards, " +
           "which take attention ranks only as the config lists them";
  if (join_group_ranks(cluster, decode_ranks, prefill_ranks, process) > 1 &&
      cluster.plane_for_flow("dispatch").kind == "zmq")
    return what + "its " + role + " groups' ranks meet over ZeroMQ at configured addresses, " +
           "which a joined rank has none of (a shm dispatch plane takes joined groups)";
  return "";
}

int32_t join_group_ranks(const transport::cluster_config& cluster, int32_t decode_ranks,
                         int32_t prefill_ranks, const std::string& process) {
  for (auto& p : cluster.processes)
    if (p.name == process && p.roles.size() == 1) {
      if (p.roles.front() == "decode") return std::max(1, decode_ranks);
      if (p.roles.front() == "prefill") return std::max(1, prefill_ranks);
    }
  return 1;
}

std::string kind_serving(const transport::cluster_config& cluster, const std::string& role) {
  for (auto& p : cluster.processes)
    if (p.roles.size() == 1 && p.roles.front() == role && p.per_process == 1) return p.name;
  return "";
}

std::string switch_refusal(const transport::cluster_config& cluster, int32_t decode_ranks,
                           int32_t prefill_ranks, const std::string& process,
                           const std::string& role) {
  const std::string what = "process '" + process + "' cannot serve '" + role + "': ";
  if (role != "prefill" && role != "decode")
    return what + "only prefill and decode instances switch roles";
  if (auto why = join_refusal(cluster, decode_ranks, prefill_ranks, process); !why.empty())
    return why;
  if (join_group_ranks(cluster, decode_ranks, prefill_ranks, process) > 1)
    return what + "it is a rank of an expert-parallel group, which would lose it";
  for (auto& p : cluster.processes)
    if (p.name == process && p.roles.front() != "prefill" && p.roles.front() != "decode")
      return what + "it serves '" + p.roles.front() + "', which does not switch";
  const auto target = kind_serving(cluster, role);
  if (target.empty()) return what + "no process kind of the config serves it alone";
  if (auto why = join_refusal(cluster, decode_ranks, prefill_ranks, target); !why.empty())
    return what + why;
  if (join_group_ranks(cluster, decode_ranks, prefill_ranks, target) > 1)
    return what + "its instances are expert-parallel groups, which one process cannot be";
  return "";
}

std::string default_join_seeds(const transport::cluster_config& cluster) {
  std::string seeds;
  for (auto& i : cluster.instances())
    if (i.role == "scheduler" || i.role == "gateway") seeds += (seeds.empty() ? "" : ",") + i.name;
  return seeds;
}

} // namespace supernode::services::cluster
