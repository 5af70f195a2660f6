#pragma once
// A serving config as the CLI uses it: topology and serving settings read from one TOML file
// (or the embedded default) by services::cluster_file, with the model folder resolved — --model
// wins, the demo model is made on first use, any other folder must exist.

#include "services/serving/cluster_file.hpp"

#include <filesystem>
#include <optional>
#include <string>

namespace supernode::apps {

struct serving_setup {
  std::string source; // the file, for messages
  transport::cluster_config cluster;
  services::serving_config serving;
};

// Makes the run folder (0700) or refuses it (another owner, group/world write: the error names
// its path, owner and mode). Throws naming the source when the model folder has no config.json,
// unless !model_required (then the folder is left as written, and only a role that loads it
// complains).
serving_setup parse_serving_setup(const std::string& toml_text, const std::string& source,
                                  const std::optional<std::string>& model_override,
                                  bool model_required = true);
serving_setup load_serving_setup(const std::filesystem::path& file,
                                 const std::optional<std::string>& model_override,
                                 bool model_required = true);

} // namespace supernode::apps
