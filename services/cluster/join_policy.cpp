#include "services/cluster/join_policy.hpp"

namespace supernode::services::cluster {

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
  if (role != "prefill" && role != "decode" && role != "mp_server")
    return what + "its role '" + role + "' takes members only as the config lists them (joins " +
           "take prefill, decode and mp_server instances)";
  const bool grouped =
      role == "decode" ? decode_ranks != 1 : role == "prefill" && prefill_ranks != 1;
  bool shards = false;
  for (auto& i : cluster.instances()) shards |= role == "decode" && i.role == "expert_shard";
  if (grouped || shards)
    return what + "its " + role + " instances form expert-parallel groups, which resize only " +
           "as the config lists them";
  return "";
}

} // namespace supernode::services::cluster
