#pragma once
// The subcommands of the `supernode` binary; each returns the process exit code.

#include "apps/cli_args.hpp"

#include <filesystem>
#include <optional>
#include <string>

namespace supernode::apps {

int cmd_generate(cli_args& args);
int cmd_tokenize(cli_args& args);
int cmd_detokenize(cli_args& args);
int cmd_model(cli_args& args);
int cmd_bench(cli_args& args);
int cmd_role(cli_args& args);
int cmd_serve(cli_args& args);
int cmd_cluster(cli_args& args);
int cmd_config(cli_args& args);
int cmd_chaos(cli_args& args);
int cmd_compose(cli_args& args);
int cmd_health(cli_args& args);

// --model DIR if given, else the demo model under $SUPERNODE_HOME/models/demo (or ./models/demo),
// made from the tiny preset on first use.
std::filesystem::path resolve_model_dir(const std::optional<std::string>& model_arg);

} // namespace supernode::apps
