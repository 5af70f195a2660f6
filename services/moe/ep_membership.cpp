#include "services/moe/ep_membership.hpp"

#include "transport/checksum.hpp"
#include "transport/plane_factory.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>

namespace supernode::services {

namespace {

std::vector<const transport::instance_config*>
of_role(const transport::cluster_config& c, const std::string& role, bool configured_only = false) {
  std::vector<const transport::instance_config*> out;
  for (auto& i : c.instances())
    if (i.role == role && !(configured_only && i.joined)) out.push_back(&i);
  // By the number in the name, whatever the process order.
  std::sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->role_index < b->role_index; });
  return out;
}

// The number in an instance name ("expert_shard-12" -> 12).
int name_index(const std::string& name) {
  return std::stoi(name.substr(name.rfind('-') + 1));
}

} // namespace

bool is_expert_shard_name(const std::string& name) {
  return name.starts_with("expert_shard-");
}

std::string ep_membership::describe() const {
  std::string s = fabric.group + " rank " + std::to_string(options.rank) + " of " +
                  std::to_string(options.ranks) + " over " + fabric_kind + " (";
  for (size_t i = 0; i < members.size(); ++i) s += (i ? ", " : "") + members[i];
  s += ")";
  if (!options.expert_hosts.empty())
    s += ", experts on " + std::to_string(options.expert_hosts.size()) + " shard(s)";
  if (options.microbatches > 1) s += ", two microbatches";
  return s;
}

std::optional<ep_membership> ep_membership_of(const transport::cluster_config& cluster,
                                              const serving_config& serving,
                                              const transport::instance_config& instance,
                                              const model::model_config& model,
                                              model::precision prec, const log::logger& log) {
  const bool shard = instance.role == "expert_shard";
  const std::string role = shard ? "decode" : instance.role;
  if (role != "decode" && role != "prefill") return std::nullopt;
  const bool decode = role == "decode";
  const int32_t size = decode ? serving.decode_ranks : serving.prefill_ranks;
  // An attention rank that joined beyond the config is one of a group of its own: the configured
  // ranks' groups are whole, so "<role>-<n>" joins group n / size, whose members are the names
  // next to it, joined or not yet (the formation takes those alive).
  const bool joined_rank = instance.joined && !shard;
  const auto attention = of_role(cluster, role, joined_rank);
  // Expert shards serve decode groups: prefill ranks host their experts themselves.
  const auto shards =
      decode ? of_role(cluster, "expert_shard") : std::vector<const transport::instance_config*>{};
  if (attention.size() % static_cast<size_t>(size) != 0)
    throw std::runtime_error("[ep] " + role + "_ranks = " + std::to_string(size) +
                             " does not divide the " + std::to_string(attention.size()) + " " +
                             role + " instances");
  if (joined_rank && size > 1) {
    if (!shards.empty())
      throw std::runtime_error(instance.name + " cannot join: the decode groups' experts are on " +
                               "expert shards, and a joined group would have none");
    if (cluster.plane_for_flow("dispatch").kind == "zmq")
      throw std::runtime_error(instance.name + " cannot join: the group's ranks meet over " +
                               "ZeroMQ at configured addresses, which a joined rank has none of");
  }
  const size_t groups = attention.size() / static_cast<size_t>(size);
  if (!shards.empty() && (groups == 0 || shards.size() % groups != 0))
    throw std::runtime_error(std::to_string(shards.size()) +
                             " expert_shard instances cannot be spread evenly over " +
                             std::to_string(groups) + " decode group(s)");
  const size_t per_group = groups ? shards.size() / groups : 0;
  size_t group = 0;
  ep_membership m;
  if (joined_rank) {
    group = static_cast<size_t>(instance.role_index / size);
    for (int32_t r = 0; r < size; ++r)
      m.members.push_back(role + "-" + std::to_string(static_cast<int32_t>(group) * size + r));
  } else {
    if (shard) {
      size_t s = 0;
      while (shards[s]->name != instance.name) ++s;
      group = s / per_group;
    } else {
      size_t a = 0;
      while (attention[a]->name != instance.name) ++a;
      group = a / static_cast<size_t>(size);
    }
    for (int32_t r = 0; r < size; ++r) m.members.push_back(attention[group * size + r]->name);
  }
  for (size_t s = 0; s < per_group; ++s) {
    m.options.expert_hosts.push_back(static_cast<int32_t>(m.members.size()));
    m.members.push_back(shards[group * per_group + s]->name);
  }
  if (m.members.size() == 1) return std::nullopt;
  m.takes_joined_shards = !joined_rank && groups == 1 && !shards.empty() &&
                          cluster.plane_for_flow("dispatch").kind != "zmq";
  if (decode && of_role(cluster, "prefill").empty())
    throw std::runtime_error("a decode instance of " + std::to_string(m.members.size()) +
                             " ranks needs prefill instances: prefilling on one rank would stall "
                             "the group's lockstep");
  m.options.ranks = static_cast<int32_t>(m.members.size());
  for (int32_t r = 0; r < m.options.ranks; ++r)
    if (m.members[r] == instance.name) m.options.rank = r;
  // A prefill step packs up to the token budget; a decode step one token per sequence.
  // A decode step verifies each sequence's MTP drafts too: batch × (1 + drafts) rows.
  m.options.local_batch = decode ? serving.decode_max_batch * (1 + serving.decode_mtp_drafts)
                                 : serving.prefill_token_budget;
  // Microbatching and EPLB are decode mechanisms here (the paper's §4.2.3 and §4.2.4).
  m.options.microbatches = decode && serving.microbatch ? 2 : 1;
  m.options.redundant_per_rank = decode ? serving.redundant_experts : 0;
  m.options.eplb_interval = decode ? serving.eplb_interval : 0;
  m.options.op_timeout = std::chrono::milliseconds(serving.ep_op_timeout_ms);

  const auto& plane = cluster.plane_for_flow("dispatch");
  m.fabric_kind = plane.kind == "zmq" ? "zmq" : "shm";
  m.fabric.cluster = cluster.name;
  m.fabric.log = log;
  m.fabric.group = role + "-ep" + std::to_string(group);
  m.fabric.rank = m.options.rank;
  m.fabric.ranks = m.options.ranks;
  const auto layout = expert_parallel::layout_for(model, prec, m.options);
  m.fabric.bytes = layout.total_bytes();
  m.fabric.flags = ep_flag_count;
  if (m.fabric_kind == "zmq") {
    for (auto& name : m.members)
      m.fabric.addresses.push_back(cluster.address(cluster.instance(name), plane, "ep"));
    m.fabric.keys = transport::cluster_keys_for(cluster);
    m.fabric.instances = m.members;
  }
  return m;
}

ep_formation formed_over(const ep_membership& configured,
                         const std::vector<std::pair<std::string, uint64_t>>& alive,
                         const model::model_config& model, model::precision prec) {
  const std::string& self = configured.members.at(configured.options.rank);
  auto incarnation_of = [&](const std::string& name) -> std::optional<uint64_t> {
    for (auto& [n, inc] : alive)
      if (n == name) return inc;
    return std::nullopt;
  };
  if (!incarnation_of(self)) throw std::runtime_error(self + " is not among the alive members");
  ep_formation f;
  f.membership = configured;
  auto& m = f.membership;
  m.members.clear();
  m.options.expert_hosts.clear();
  m.fabric.addresses.clear();
  struct seat {
    std::string name;
    uint64_t incarnation;
    std::string address;
  };
  std::vector<seat> attention, hosts;
  for (size_t i = 0; i < configured.members.size(); ++i) {
    const auto& name = configured.members[i];
    const auto inc = incarnation_of(name);
    if (!inc) continue;
    const bool host =
        std::find(configured.options.expert_hosts.begin(), configured.options.expert_hosts.end(),
                  static_cast<int32_t>(i)) != configured.options.expert_hosts.end();
    (host ? hosts : attention)
        .push_back({name, *inc,
                    configured.fabric.addresses.empty() ? "" : configured.fabric.addresses[i]});
  }
  if (configured.takes_joined_shards)
    for (auto& [name, inc] : alive)
      if (is_expert_shard_name(name) &&
          std::find(configured.members.begin(), configured.members.end(), name) ==
              configured.members.end())
        hosts.push_back({name, inc, ""});
  std::sort(hosts.begin(), hosts.end(),
            [](auto& a, auto& b) { return name_index(a.name) < name_index(b.name); });
  std::string key;
  for (auto* group : {&attention, &hosts})
    for (auto& s : *group) {
      if (group == &hosts) m.options.expert_hosts.push_back(static_cast<int32_t>(m.members.size()));
      if (s.name == self) m.options.rank = static_cast<int32_t>(m.members.size());
      m.members.push_back(s.name);
      if (!configured.fabric.addresses.empty()) m.fabric.addresses.push_back(s.address);
      key += s.name + ":" + std::to_string(s.incarnation) + ";";
    }
  if (!configured.options.expert_hosts.empty() && m.options.expert_hosts.empty())
    throw std::runtime_error("group " + configured.fabric.group + " has no expert shard alive");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(transport::fnv1a(key.data(), key.size())));
  f.epoch = std::string(hex, 10);
  m.options.ranks = static_cast<int32_t>(m.members.size());
  m.fabric.rank = m.options.rank;
  m.fabric.ranks = m.options.ranks;
  m.fabric.group = configured.fabric.group + "-" + f.epoch;
  m.fabric.bytes = expert_parallel::layout_for(model, prec, m.options).total_bytes();
  m.fabric.instances = m.fabric.addresses.empty() ? std::vector<std::string>{} : m.members;
  // ipc sockets are files: one per formation. A tcp port stays the instance's; the fabric's
  // routing ids carry the group name, so a rank of another formation is never taken for one.
  for (auto& a : m.fabric.addresses)
    if (a.starts_with("ipc://")) a += "." + f.epoch;
  return f;
}

} // namespace supernode::services
