#include "apps/cluster_runner.hpp"
#include "apps/commands.hpp"
#include "transport/cluster_keys.hpp"

#include <cstdio>

namespace supernode::apps {

namespace {

// Makes the key pairs the config's instances lack, in its key folder (0700, files 0600). Run it
// once before handing the folder's .public files (and each host's .secret files) out; running
// it again makes only what is missing.
int cluster_keys(const transport::cluster_config& cluster) {
  const transport::cluster_keys keys(cluster.keys_dir());
  std::vector<std::string> names;
  for (const auto& instance : cluster.instances()) names.push_back(instance.name);
  const auto made = keys.ensure(names);
  std::printf("cluster %s keys in %s: made %zu key pair(s), %zu instance(s) had theirs\n",
              cluster.name.c_str(), keys.dir().c_str(), made.size(), names.size() - made.size());
  for (const auto& name : made)
    std::printf("made %s.secret and %s.public\n", name.c_str(), name.c_str());
  return 0;
}

// "decode=2" -> ("decode", 2).
std::pair<std::string, int> parse_process_count(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw usage_error("cluster scale: '" + text + "' is not PROCESS=COUNT");
  try {
    size_t used = 0;
    const int count = std::stoi(text.substr(eq + 1), &used);
    if (used != text.size() - eq - 1 || count < 0) throw std::invalid_argument("count");
    return {text.substr(0, eq), count};
  } catch (const std::exception&) {
    throw usage_error("cluster scale: '" + text + "': the count must be a whole number >= 0");
  }
}

} // namespace

int cmd_cluster(cli_args& args) {
  auto action = args.take_positional();
  auto config = args.take("--config");
  auto model = args.take("--model");
  if (!action ||
      (*action != "up" && *action != "status" && *action != "down" && *action != "keys" &&
       *action != "supervise" && *action != "scale") ||
      !config || (*action == "supervise" && !model))
    throw usage_error("expected `cluster up|status|down|keys --config FILE [--model DIR]` "
                      "(up: [--owner-pid PID]; status: [--json]) or "
                      "`cluster scale --config FILE PROCESS=COUNT... [--operation-id ID] "
                      "[--drain finish|migrate] [--drain-timeout-s N] [--switch] [--json]`");
  const bool status_json = *action == "status" && args.take_flag("--json");
  // The cluster goes down by itself when this process ends (a test harness's own pid).
  const auto owner_pid = *action == "up" || *action == "supervise"
                             ? static_cast<pid_t>(args.take_int("--owner-pid", 0, 1, 4194304))
                             : pid_t{0};
  scale_options scale;
  if (*action == "scale") {
    scale.operation_id = args.take_or("--operation-id", "");
    scale.drain_timeout = std::chrono::seconds(args.take_int("--drain-timeout-s", 60, 1, 86400));
    scale.drain = args.take_or("--drain", "");
    if (!scale.drain.empty() && scale.drain != "finish" && scale.drain != "migrate")
      throw usage_error("cluster scale: --drain is finish or migrate, not '" + scale.drain + "'");
    scale.json = args.take_flag("--json");
    scale.switch_roles = args.take_flag("--switch");
    while (auto count = args.take_positional()) scale.counts.emplace(parse_process_count(*count));
    if (scale.counts.empty()) throw usage_error("cluster scale: give PROCESS=COUNT, e.g. decode=1");
  }
  args.expect_consumed("cluster " + *action);
  // Only `up` starts roles that load the model (the supervisor it starts gets the folder `up`
  // resolved); the others just find the processes.
  const bool up = *action == "up";
  auto setup = load_serving_setup(*config, model, up);
  if (up) return cluster_up(setup, *config, owner_pid);
  if (*action == "supervise") return cluster_supervise(setup, *config, *model, owner_pid);
  if (*action == "status") return cluster_status(setup, status_json);
  if (*action == "scale") return cluster_scale(setup, scale);
  if (*action == "keys") return cluster_keys(setup.cluster);
  return cluster_down(setup);
}

} // namespace supernode::apps
