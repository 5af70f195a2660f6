#include "apps/serving_setup.hpp"

#include "apps/commands.hpp"
#include "transport/private_files.hpp"

#include <stdexcept>

namespace supernode::apps {

serving_setup parse_serving_setup(const std::string& text, const std::string& source,
                                  const std::optional<std::string>& model_override,
                                  bool model_required) {
  auto file = services::cluster_file::parse(text, source);
  serving_setup s{source, std::move(file.cluster), std::move(file.serving)};
  // The run folder is the first trust boundary: sockets, keys, logs, pid files and the SSD tier
  // live in it, so it is this user's alone (0700) or nothing starts. Every command that runs or
  // finds a cluster's processes reads its setup here first, before anything binds or writes.
  transport::ensure_private_dir(s.cluster.run_dir);
  if (model_override) {
    s.serving.model_path = *model_override;
  } else if (model_required && s.serving.model_path.lexically_normal() == "models/demo") {
    s.serving.model_path = resolve_model_dir(std::nullopt);
  }
  if (!model_required) return s;
  if (!std::filesystem::exists(s.serving.model_path / "config.json"))
    throw std::runtime_error("no model at " + s.serving.model_path.string() + " (from " +
                             (model_override ? std::string("--model") : source) +
                             "): config.json is missing");
  s.serving.model_path = std::filesystem::absolute(s.serving.model_path);
  return s;
}

serving_setup load_serving_setup(const std::filesystem::path& file,
                                 const std::optional<std::string>& model_override,
                                 bool model_required) {
  return parse_serving_setup(transport::read_config_file(file), file.string(), model_override,
                             model_required);
}

} // namespace supernode::apps
