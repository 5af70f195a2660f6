#include "services/chaos/fault_plan.hpp"

#include "services/loadgen/workload.hpp"
#include "transport/cluster_config.hpp"
#include "transport/config_document.hpp"

#include <array>
#include <stdexcept>

namespace supernode::services::chaos {

namespace {

using transport::config_key;
using transport::config_type;
using transport::config_value;

constexpr std::array<const char*, 8> kind_names{"kill",      "stop",    "drop",      "delay",
                                                "duplicate", "corrupt", "disk_full", "slow_store"};

enum key_index : size_t { k_at, k_kind, k_target, k_role, k_duration, k_rate, k_delay, k_flow };

const std::vector<config_key>& fault_keys() {
  static const std::vector<config_key> keys = [] {
    std::vector<config_key> k{
        {"at_s", config_type::floating, "seconds after the load starts"},
        {"kind", config_type::string, "what the fault does"},
        {"target", config_type::string, "an instance or a process slot (<process>-<index>)"},
        {"role", config_type::string, "one instance of this role, picked from the seed"},
        {"duration_s", config_type::floating, "how long a stop or a window lasts"},
        {"rate", config_type::floating, "plane faults: the fraction of frames taken"},
        {"delay_ms", config_type::integer, "delay, slow_store: how much later"},
        {"flow", config_type::string, "plane faults: the flow whose frames are taken"},
    };
    k[k_at].required = k[k_kind].required = true;
    k[k_at].low = 0;
    k[k_kind].choices.assign(kind_names.begin(), kind_names.end());
    k[k_duration].low = 0;
    k[k_rate].low = 0, k[k_rate].high = 1, k[k_rate].low_open = true;
    k[k_delay].min = 1;
    return k;
  }();
  return keys;
}

fault_kind kind_named(const std::string& name) {
  for (size_t i = 0; i < kind_names.size(); ++i)
    if (name == kind_names[i]) return static_cast<fault_kind>(i);
  throw std::logic_error("unchecked fault kind " + name); // the key's choices list them all
}

// What a fault's kind needs beyond the keys' own checks.
void check_kind_needs(const transport::config_document& doc, const transport::config_path& table,
                      const fault_spec& f, bool has_duration, bool has_delay) {
  const std::string kind = to_string(f.kind);
  if (!f.target.empty() && !f.role.empty())
    doc.fail(table, "role", "and target are both given; a fault has one of them");
  if (is_process_fault(f.kind) && f.target.empty() && f.role.empty())
    doc.fail(table, "target", "(or role) is required for a " + kind + " fault");
  if (f.kind != fault_kind::kill && (!has_duration || f.duration_s <= 0))
    doc.fail(table, "duration_s", "must be > 0 for a " + kind + " fault");
  if (is_plane_fault(f.kind) && f.flow.empty())
    doc.fail(table, "flow", "is required for a " + kind + " fault");
  if (!is_plane_fault(f.kind) && !f.flow.empty())
    doc.fail(table, "flow", "applies to plane faults only, not to " + kind);
  if ((f.kind == fault_kind::delay || f.kind == fault_kind::slow_store) && !has_delay)
    doc.fail(table, "delay_ms", "is required for a " + kind + " fault");
}

} // namespace

const char* to_string(fault_kind k) {
  return kind_names[static_cast<size_t>(k)];
}

bool is_plane_fault(fault_kind k) {
  return k == fault_kind::drop || k == fault_kind::delay || k == fault_kind::duplicate ||
         k == fault_kind::corrupt;
}

bool is_process_fault(fault_kind k) {
  return k == fault_kind::kill || k == fault_kind::stop;
}

fault_plan parse_fault_plan(std::string_view text, const std::string& source) {
  const transport::config_document doc(text, source);
  const std::vector<std::string> tables{"fault"};
  doc.check_tables(tables);
  fault_plan plan;
  const size_t n = doc.table_count({"fault"});
  if (n == 0) throw std::runtime_error(source + ": no [[fault]] in the plan");
  for (size_t index = 0; index < n; ++index) {
    const transport::config_path table{"fault", std::to_string(index)};
    fault_spec f;
    f.index = index;
    bool has_duration = false, has_delay = false;
    doc.read_table(table, fault_keys(), {}, [&](size_t i, config_value v) {
      switch (i) {
      case k_at:
        f.at_s = std::get<double>(v);
        break;
      case k_kind:
        f.kind = kind_named(std::get<std::string>(v));
        break;
      case k_target:
        f.target = std::get<std::string>(v);
        break;
      case k_role:
        f.role = std::get<std::string>(v);
        break;
      case k_duration:
        f.duration_s = std::get<double>(v);
        has_duration = true;
        break;
      case k_rate:
        f.rate = std::get<double>(v);
        break;
      case k_delay:
        f.delay_ms = std::get<int64_t>(v);
        has_delay = true;
        break;
      case k_flow:
        f.flow = std::get<std::string>(v);
        break;
      }
    });
    check_kind_needs(doc, table, f, has_duration, has_delay);
    plan.faults.push_back(std::move(f));
  }
  return plan;
}

fault_plan load_fault_plan(const std::filesystem::path& file) {
  return parse_fault_plan(transport::read_config_file(file), file.string());
}

std::optional<resolved_target>
resolve_target(const fault_spec& fault, const transport::cluster_config& cluster, uint64_t seed) {
  const auto& all = cluster.instances();
  const transport::instance_config* picked = nullptr;
  std::string named = fault.target;
  auto slot_of = [](const std::string& process, int index) {
    return process + "-" + std::to_string(index);
  };
  if (!fault.role.empty()) {
    std::vector<const transport::instance_config*> of_role;
    for (const auto& i : all)
      if (i.role == fault.role) of_role.push_back(&i);
    if (of_role.empty())
      throw std::runtime_error("fault " + std::to_string(fault.index) + ": role '" + fault.role +
                               "' has no instance in cluster " + cluster.name);
    // The fault's own stream: adding a fault to a plan does not move the others' picks.
    loadgen::random_stream rng(seed ^ (0x9e3779b97f4a7c15ull * (fault.index + 1)));
    picked =
        of_role[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(of_role.size()) - 1))];
    named = picked->name;
  } else if (!fault.target.empty()) {
    for (const auto& i : all)
      if (i.name == fault.target) picked = &i;
    if (!picked)
      for (const auto& i : all)
        if (slot_of(i.process, i.index) == fault.target) {
          picked = &i;
          break;
        }
    if (!picked)
      throw std::runtime_error("fault " + std::to_string(fault.index) + ": target '" +
                               fault.target + "' is no instance or process slot of cluster " +
                               cluster.name);
  } else {
    return std::nullopt;
  }
  resolved_target out;
  out.process = picked->process;
  out.index = picked->index;
  out.slot = slot_of(out.process, out.index);
  for (const auto& i : all)
    if (i.process == out.process && i.index == out.index) out.instances.push_back(i.name);
  out.named = named;
  return out;
}

} // namespace supernode::services::chaos
