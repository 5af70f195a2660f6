#pragma once
// `supernode cluster scale` and `cluster status` of a test cluster, as a user runs them, read
// as their one-line JSON answers (what the scale tests share).

#include "../support/child_process.hpp"
#include "../support/sanitizer_slowdown.hpp"
#include "../support/serving_cluster.hpp"

#include <algorithm>
#include <gtest/gtest.h>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace supernode::testing {

// `supernode cluster <action> --config <the cluster's> --json ARGS...`: its one-line answer.
inline nlohmann::json cluster_cli(const serving_cluster& cluster, const std::string& action,
                                  const std::vector<std::string>& args) {
  std::vector<std::string> argv{serving_cluster::binary(),      "cluster", action, "--config",
                                cluster.config_file().string(), "--json"};
  argv.insert(argv.end(), args.begin(), args.end());
  child_process cli(argv);
  std::string out;
  while (auto line = cli.read_line(scaled(std::chrono::seconds(240)))) out += *line;
  const auto status = cli.wait(std::chrono::seconds(30));
  EXPECT_TRUE(status && status->exited()) << out;
  return nlohmann::json::parse(out, nullptr, false);
}

// Drains get the CLI's default 60 s stretched by the build's slowdown: under ThreadSanitizer,
// finishing a draining instance's sequences took longer than 60 s, so the drain was cut short
// and its requests placed again, which the tests that drain check never happens.
inline nlohmann::json scale(const serving_cluster& cluster, std::vector<std::string> counts) {
  if (std::find(counts.begin(), counts.end(), "--drain-timeout-s") == counts.end()) {
    counts.push_back("--drain-timeout-s");
    counts.push_back(std::to_string(scaled(60)));
  }
  return cluster_cli(cluster, "scale", counts);
}

// A scale the supervisor refuses, with `why` in its error, changing nothing.
inline void expect_scale_refused(const serving_cluster& cluster,
                                 const std::vector<std::string>& counts, const std::string& why) {
  const auto refused = scale(cluster, counts);
  EXPECT_EQ(refused["ok"], false) << refused.dump();
  EXPECT_NE(refused.value("error", "").find(why), std::string::npos) << refused.dump();
}

// Slot -> phase, from `cluster status --json`.
inline std::map<std::string, std::string> phases(const serving_cluster& cluster) {
  const auto status = cluster_cli(cluster, "status", {});
  std::map<std::string, std::string> out;
  if (!status.is_object()) return out;
  for (auto& p : status["processes"])
    out[p["process"].get<std::string>()] = p["phase"].get<std::string>();
  return out;
}

} // namespace supernode::testing
