#include <string>
#include <vector>

#include "apps/bench/kernel_bench.hpp"
#include "apps/bench/model_bench.hpp"
#include "apps/commands.hpp"

namespace supernode::apps {

int cmd_bench(cli_args& args) {
  auto what = args.take_positional();
  if (what && *what == "model")
    return run_model_bench(args);
  if (what && *what == "kernels") {
    // The kernel benchmark parses its own options: hand it the rest as argv.
    std::vector<std::string> rest = args.take_rest();
    std::vector<char*> argv;
    for (auto& a : rest)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    return run_kernel_bench(static_cast<int>(rest.size()), argv.data());
  }
  throw usage_error("expected `bench kernels` or `bench model`");
}

} // namespace supernode::apps
