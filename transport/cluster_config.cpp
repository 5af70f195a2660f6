#include "transport/cluster_config.hpp"

#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <toml++/toml.h>

namespace supernode::transport {

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& what) {
  throw std::runtime_error(source + ": " + what);
}

template<class T>
T get_or(const toml::table& t, const char* key, T fallback, const std::string& source,
         const std::string& where) {
  const toml::node* n = t.get(key);
  if (!n) return fallback;
  if (auto v = n->value<T>()) return *v;
  fail(source, where + "." + key + " has the wrong type");
}

} // namespace

cluster_config cluster_config::parse(std::string_view text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream os;
    os << e.description() << " at line " << e.source().begin.line;
    fail(source, os.str());
  }
  cluster_config c;
  c.run_dir = std::filesystem::temp_directory_path() / "supernode";
  if (auto* cl = root["cluster"].as_table()) {
    c.name = get_or<std::string>(*cl, "name", c.name, source, "cluster");
    c.run_dir = get_or<std::string>(*cl, "run_dir", c.run_dir.string(), source, "cluster");
    c.heartbeat_interval = std::chrono::milliseconds(
        get_or<int64_t>(*cl, "heartbeat_ms", c.heartbeat_interval.count(), source, "cluster"));
    c.missed_heartbeats = static_cast<int>(
        get_or<int64_t>(*cl, "missed_heartbeats", c.missed_heartbeats, source, "cluster"));
    if (c.heartbeat_interval.count() <= 0 || c.missed_heartbeats <= 0)
      fail(source, "cluster.heartbeat_ms and cluster.missed_heartbeats must be positive");
  }
  if (c.name.empty() || c.name.find_first_of("/. ") != std::string::npos)
    fail(source, "cluster.name must be non-empty without '/', '.' or spaces");

  if (auto* planes = root["planes"].as_table()) {
    for (auto& [key, node] : *planes) {
      const std::string where = "planes." + std::string(key.str());
      auto* t = node.as_table();
      if (!t) fail(source, where + " must be a table");
      plane_config p;
      p.name = std::string(key.str());
      p.kind = get_or<std::string>(*t, "kind", "", source, where);
      if (p.kind != "inproc" && p.kind != "shm" && p.kind != "zmq")
        fail(source, where + ".kind must be inproc, shm or zmq, got '" + p.kind + "'");
      p.transport = get_or<std::string>(*t, "transport", p.transport, source, where);
      if (p.transport != "ipc" && p.transport != "tcp")
        fail(source, where + ".transport must be ipc or tcp");
      p.host = get_or<std::string>(*t, "host", p.host, source, where);
      p.base_port = static_cast<int>(get_or<int64_t>(*t, "base_port", 0, source, where));
      if (p.kind == "zmq" && p.transport == "tcp" && (p.base_port <= 0 || p.base_port > 65000))
        fail(source, where + ".base_port must be in [1, 65000] for tcp");
      p.queue_limit = static_cast<size_t>(
          get_or<int64_t>(*t, "queue_limit", static_cast<int64_t>(p.queue_limit), source, where));
      p.ring_bytes = static_cast<size_t>(
          get_or<int64_t>(*t, "ring_bytes", static_cast<int64_t>(p.ring_bytes), source, where));
      c.planes[p.name] = p;
    }
  }
  if (c.planes.empty()) c.planes["inproc"] = plane_config{"inproc", "inproc"};

  if (auto* flows = root["flows"].as_table())
    for (auto& [key, node] : *flows) {
      auto v = node.value<std::string>();
      if (!v) fail(source, "flows." + std::string(key.str()) + " must name a plane");
      if (!c.planes.count(*v))
        fail(source, "flows." + std::string(key.str()) + " names unknown plane '" + *v + "'");
      c.flows[std::string(key.str())] = *v;
    }

  std::set<std::string> names;
  if (auto* procs = root["process"].as_table()) {
    for (auto& [key, node] : *procs) {
      const std::string where = "process." + std::string(key.str());
      auto* t = node.as_table();
      if (!t) fail(source, where + " must be a table");
      process_config p;
      p.name = std::string(key.str());
      p.count = static_cast<int>(get_or<int64_t>(*t, "count", 1, source, where));
      if (p.count < 1 || p.count > 4096) fail(source, where + ".count must be in [1, 4096]");
      auto* roles = t->get_as<toml::array>("roles");
      if (!roles || roles->empty())
        fail(source, where + ".roles must be a non-empty array of role names");
      for (auto& r : *roles) {
        auto v = r.value<std::string>();
        if (!v || v->empty()) fail(source, where + ".roles must hold strings");
        p.roles.push_back(*v);
      }
      p.threads = static_cast<int>(get_or<int64_t>(*t, "threads", 0, source, where));
      p.per_process = static_cast<int>(get_or<int64_t>(*t, "per_process", 1, source, where));
      if (p.per_process < 1 || p.per_process > 256)
        fail(source, where + ".per_process must be in [1, 256]");
      if (p.threads < 0 || p.threads > 1024) fail(source, where + ".threads must be in [0, 1024]");
      if (auto* cpus = t->get("cpus")) {
        auto* list = cpus->as_array();
        if (!list) fail(source, where + ".cpus must be an array of CPU numbers");
        for (auto& cpu : *list) {
          auto v = cpu.value<int64_t>();
          if (!v || *v < 0 || *v > 4095) fail(source, where + ".cpus must hold CPU numbers");
          p.cpus.push_back(static_cast<int>(*v));
        }
      }
      c.processes.push_back(p);
    }
  }
  int ordinal = 0;
  for (auto& p : c.processes)
    for (int i = 0; i < p.count; ++i)
      for (auto& r : p.roles)
        for (int j = 0; j < p.per_process; ++j) {
          const int role_index = i * p.per_process + j;
          instance_config inst{
              r + "-" + std::to_string(role_index), r, p.name, i, ordinal++, role_index};
          if (!names.insert(inst.name).second)
            fail(source, "instance '" + inst.name + "' is hosted by two processes");
          c.instances_.push_back(inst);
        }
  return c;
}

std::string read_config_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot open config " + file.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

cluster_config cluster_config::load(const std::filesystem::path& file) {
  return parse(read_config_file(file), file.string());
}

std::vector<instance_config> cluster_config::instances_of(const std::string& process,
                                                          int index) const {
  std::vector<instance_config> out;
  bool known = false;
  for (auto& p : processes)
    if (p.name == process) {
      known = true;
      if (index < 0 || index >= p.count)
        throw std::runtime_error("process '" + process + "' has " + std::to_string(p.count) +
                                 " instances; --id " + std::to_string(index) + " is out of range");
    }
  if (!known) throw std::runtime_error("no process '" + process + "' in cluster '" + name + "'");
  for (auto& i : instances_)
    if (i.process == process && i.index == index) out.push_back(i);
  return out;
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

std::string cluster_config::address(const instance_config& inst, const plane_config& plane,
                                    const std::string& channel) const {
  if (plane.kind == "zmq") {
    if (plane.transport == "tcp")
      return "tcp://" + plane.host + ":" +
             std::to_string(plane.base_port + inst.ordinal * 3 +
                            (channel == "bulk" ? 1
                             : channel == "ep" ? 2
                                               : 0));
    return "ipc://" + (run_dir / (inst.name + "." + plane.name + "." + channel)).string();
  }
  return plane.kind + ":" + name + "/" + inst.name;
}

} // namespace supernode::transport
