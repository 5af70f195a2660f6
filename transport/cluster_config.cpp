#include "transport/cluster_config.hpp"

#include "transport/config_schema.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <unistd.h>

namespace supernode::transport {

namespace {

const config_table<cluster_config>& cluster_table() {
  static const auto table =
      config_table<cluster_config>("cluster", "The cluster as a whole: its name, its run folder "
                                              "and how peers tell that one of them died.")
          .string("name", &cluster_config::name,
                  "names the cluster's shm segments and endpoints, so clusters side by side "
                  "do not meet")
          .rule("no '/', '.' or spaces")
          .string("run_dir", &cluster_config::run_dir,
                  "logs, pid files and ipc sockets of the cluster's processes")
          .documented_default("`$TMPDIR/supernode` (`/tmp/supernode`)")
          .string("key_dir", &cluster_config::key_dir,
                  "the instances' CurveZMQ key pairs (`supernode cluster keys` makes them); "
                  "when unset, the processes make any that are missing in the default folder")
          .documented_default("`<run_dir>/keys`")
          .integer("heartbeat_ms", &cluster_config::heartbeat_interval, 1, 60000,
                   "milliseconds between two heartbeats of an endpoint to its peers")
          .integer("missed_heartbeats", &cluster_config::missed_heartbeats, 1, 10000,
                   "heartbeats a peer may miss before it counts as dead");
  return table;
}

const config_table<plane_config>& plane_table() {
  static const auto table =
      config_table<plane_config>(
          "planes.<name>",
          "A plane (transport) the cluster's flows can use. Without any [planes.*] table "
          "every flow goes over one plane named `inproc` of kind inproc.")
          .string("kind", &plane_config::kind,
                  "inproc: one process; shm: shared-memory rings between processes of one host "
                  "(the UB stand-in); zmq: ZeroMQ sockets (RDMA and VPC stand-ins)")
          .choices({"inproc", "shm", "zmq"})
          .required()
          .string("transport", &plane_config::transport,
                  "zmq: ipc sockets in run_dir (one host) or tcp (across hosts)")
          .choices({"ipc", "tcp"})
          .string("host", &plane_config::host,
                  "zmq over tcp: the address endpoints bind to; \"{process}\": each instance's "
                  "own host, named after its process slot (decode #1: decode-1, '_' as '-'), "
                  "as docker-compose's bridge networks name containers")
          .integer("base_port", &plane_config::base_port, 0, 65000,
                   "zmq over tcp: instance i uses base_port + 3i (control), +1 (bulk), +2 (ep)")
          .rule("at least 1 for zmq over tcp")
          .integer(
              "queue_limit", &plane_config::queue_limit, 1, int64_t{1} << 24,
              "inproc and zmq: messages queued towards one peer before sends report queue_full")
          .integer("ring_bytes", &plane_config::ring_bytes, 4096, int64_t{1} << 30,
                   "shm: bytes of each ring between an ordered pair of peers (rounded up to a "
                   "power of two); a frame up to half of it goes in one piece");
  return table;
}

// The flows the code sends on, each assigned to a plane by name.
const config_table<cluster_config>& flows_table() {
  static const auto table = [] {
    config_table<cluster_config> t(
        "flows", "Which plane carries which flow; each value names a [planes.<name>] table.");
    const std::pair<const char*, const char*> flows[] = {
        {"default", "any flow the table does not list"},
        {"control", "control messages and heartbeats between role instances"},
        {"bulk", "the KV cache from prefill to decode, once per request"},
        {"dispatch", "MoE dispatch and combine between the ranks of an expert-parallel group"},
        {"ems", "requests to the EMS memory pool and its replies"}};
    for (auto [flow, meaning] : flows) {
      const std::string name = flow;
      t.custom(
           config_key{name, config_type::string, meaning},
           [name](cluster_config& c, config_value v) {
             c.flows[name] = std::get<std::string>(std::move(v));
           },
           [name](const cluster_config& c) -> config_value {
             auto it = c.flows.find(name);
             return it == c.flows.end() ? std::string() : it->second;
           })
          .documented_default(name == "default" ? "the only plane, when there is one"
                                                : "the default flow's plane");
    }
    return t;
  }();
  return table;
}

const config_table<process_config>& process_table() {
  static const auto table =
      config_table<process_config>(
          "process.<name>",
          "A kind of process and the role instances each of its processes hosts. Process "
          "`decode` #1 with roles = [\"decode\", \"expert_shard\"] hosts decode-1 and "
          "expert_shard-1.")
          .strings("roles", &process_config::roles,
                   "the roles each process hosts an instance of (gateway, scheduler, prefill, "
                   "decode, expert_shard, mp_controller, mp_server, echo)")
          .required()
          .rule("non-empty, no empty names")
          .integer("count", &process_config::count, 1, 4096, "processes of this kind")
          .integer("threads", &process_config::threads, 0, 1024,
                   "compute threads of each process; 0: all cores")
          .integer("per_process", &process_config::per_process, 1, 256,
                   "instances of each role in one process (ranks as threads)")
          .integers("cpus", &process_config::cpus, 0, 4095,
                    "CPUs each process is pinned to; empty: not pinned")
          .enumerated("restart", &process_config::restart,
                      {{"always", restart_mode::always},
                       {"on-failure", restart_mode::on_failure},
                       {"never", restart_mode::never}},
                      "when the supervisor of `cluster up` starts an ended process again: "
                      "always, on-failure (an exit code other than 0 or a signal), never")
          .integer("restart_backoff_ms", &process_config::restart_backoff, 1, 3'600'000,
                   "wait before the first restart; each further one waits twice the last")
          .integer("restart_backoff_max_ms", &process_config::restart_backoff_max, 1, 3'600'000,
                   "the longest wait before a restart")
          .rule("at least restart_backoff_ms")
          .integer("restart_window_s", &process_config::restart_window, 1, 86'400,
                   "max_restarts counts failures within this time; a process up this long "
                   "starts its back-off afresh")
          .integer("max_restarts", &process_config::max_restarts, 0, 1'000'000,
                   "restarts within restart_window_s; the next failure is given up on and "
                   "reported")
          .integer("liveness_timeout_ms", &process_config::liveness_timeout, 0, 3'600'000,
                   "a process whose role actors show no sign of life (SIGSTOPped, stuck) for "
                   "this long is killed by the supervisor, and so restarted; 0: never; unset: "
                   "three times the cluster's liveness bound (peers fence it first)");
  return table;
}

std::vector<instance_config> expand_instances(const config_document& file,
                                              const std::vector<process_config>& processes) {
  std::vector<instance_config> instances;
  std::set<std::string> names;
  int ordinal = 0;
  for (auto& p : processes)
    for (int i = 0; i < p.count; ++i)
      for (auto& r : p.roles)
        for (int j = 0; j < p.per_process; ++j) {
          const int role_index = i * p.per_process + j;
          instance_config inst{
              r + "-" + std::to_string(role_index), r, p.name, i, ordinal++, role_index};
          if (!names.insert(inst.name).second)
            file.fail({"process", p.name}, "",
                      "instance '" + inst.name + "' is hosted by two processes");
          instances.push_back(inst);
        }
  return instances;
}

} // namespace

cluster_config cluster_config::from(const config_document& file) {
  cluster_config c;
  cluster_table().read(file, c);
  if (c.run_dir.empty()) c.run_dir = std::filesystem::temp_directory_path() / "supernode";
  if (c.name.empty() || c.name.find_first_of("/. ") != std::string::npos)
    file.fail({"cluster"}, "name", "must be non-empty without '/', '.' or spaces");

  for (auto& name : file.subtables({"planes"})) {
    plane_config p;
    p.name = name;
    plane_table().read(file, {"planes", name}, p);
    if (p.kind == "zmq" && p.transport == "tcp" && p.base_port <= 0)
      file.fail({"planes", name}, "base_port", "must be in [1, 65000] for zmq over tcp");
    c.planes[name] = p;
  }
  if (c.planes.empty()) c.planes["inproc"] = plane_config{"inproc", "inproc"};

  flows_table().read(file, c);
  std::vector<std::string> plane_names;
  for (auto& [name, plane] : c.planes) plane_names.push_back(name);
  for (auto& [flow, plane] : c.flows)
    if (!c.planes.count(plane)) {
      const auto near = nearest_name(plane, plane_names);
      file.fail({"flows"}, flow,
                "names unknown plane '" + plane + "'" +
                    (near.empty() ? "" : " (did you mean '" + near + "'?)"));
    }

  for (auto& name : file.subtables({"process"})) {
    process_config p;
    p.name = name;
    process_table().read(file, {"process", name}, p);
    if (p.roles.empty() ||
        std::any_of(p.roles.begin(), p.roles.end(), [](auto& r) { return r.empty(); }))
      file.fail({"process", name}, "roles", "must be a non-empty array of role names");
    if (p.restart_backoff_max < p.restart_backoff)
      file.fail(
          {"process", name}, "restart_backoff_max_ms",
          std::to_string(p.restart_backoff_max.count()) +
              " is less than restart_backoff_ms = " + std::to_string(p.restart_backoff.count()));
    c.processes.push_back(p);
  }
  c.instances_ = expand_instances(file, c.processes);
  return c;
}

cluster_config cluster_config::parse(std::string_view text, const std::string& source) {
  return from(config_document(text, source));
}

std::vector<config_table_doc> cluster_config::tables() {
  return {cluster_table().document(), plane_table().document(), flows_table().document(),
          process_table().document()};
}

cluster_config cluster_config::load(const std::filesystem::path& file) {
  return from(config_document::load(file));
}

std::vector<instance_config> cluster_config::instances_of(const std::string& process,
                                                          int index) const {
  std::vector<instance_config> out;
  for (auto& i : instances_)
    if (i.process == process && i.index == index) out.push_back(i);
  if (!out.empty()) return out;
  for (auto& p : processes)
    if (p.name == process)
      throw std::runtime_error("process '" + process + "' has " + std::to_string(p.count) +
                               " instances; --id " + std::to_string(index) + " is out of range");
  throw std::runtime_error("no process '" + process + "' in cluster '" + name + "'");
}

const instance_config& cluster_config::add_joined_instance(const std::string& process,
                                                           const std::string& role,
                                                           int role_index) {
  const std::string n = role + "-" + std::to_string(role_index);
  for (auto& i : instances_)
    if (i.name == n) throw std::runtime_error("instance '" + n + "' is in the config already");
  instance_config inst{n, role, process, role_index, -1, role_index};
  inst.joined = true;
  instances_.push_back(inst);
  return instances_.back();
}

const instance_config& cluster_config::instance(const std::string& n) const {
  for (auto& i : instances_)
    if (i.name == n) return i;
  throw std::runtime_error("no instance '" + n + "' in cluster '" + name + "'");
}

const plane_config& cluster_config::plane_for_flow(const std::string& flow) const {
  auto it = flows.find(flow);
  if (it != flows.end()) return planes.at(it->second);
  if (auto d = flows.find("default"); d != flows.end()) return planes.at(d->second);
  if (planes.size() == 1) return planes.begin()->second;
  throw std::runtime_error("cluster '" + name + "' assigns no plane to flow '" + flow + "'");
}

std::string cluster_config::process_host(const instance_config& inst) {
  // A joined instance binds on the host it runs on (a container's own name resolves to it).
  if (inst.joined) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    return name;
  }
  std::string host = inst.process + "-" + std::to_string(inst.index);
  std::replace(host.begin(), host.end(), '_', '-');
  return host;
}

std::string cluster_config::address(const instance_config& inst, const plane_config& plane,
                                    const std::string& channel) const {
  if (plane.kind == "zmq") {
    const std::string host = plane.host == per_process_host ? process_host(inst) : plane.host;
    // A joined instance has no ports in the config: the kernel picks free ones at bind time.
    if (plane.transport == "tcp" && inst.joined) return "tcp://" + host + ":*";
    if (plane.transport == "tcp")
      return "tcp://" + host + ":" +
             std::to_string(plane.base_port + inst.ordinal * 3 +
                            (channel == "bulk" ? 1
                             : channel == "ep" ? 2
                                               : 0));
    return "ipc://" + (run_dir / (inst.name + "." + plane.name + "." + channel)).string();
  }
  return plane.kind + ":" + name + "/" + inst.name;
}

} // namespace supernode::transport
