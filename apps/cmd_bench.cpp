#include "apps/bench/cache_bench.hpp"
#include "apps/bench/inproc_plane_bench.hpp"
#include "apps/bench/kernel_bench.hpp"
#include "apps/bench/model_bench.hpp"
#include "apps/bench/model_cache_bench.hpp"
#include "apps/bench/moe_bench.hpp"
#include "apps/bench/mtp_bench.hpp"
#include "apps/bench/resume_bench.hpp"
#include "apps/bench/scale_bench.hpp"
#include "apps/bench/serve_bench.hpp"
#include "apps/bench/shm_plane_bench.hpp"
#include "apps/bench/zmq_plane_bench.hpp"
#include "apps/commands.hpp"

#include <cstdio>
#include <string>
#include <vector>

namespace supernode::apps {

int cmd_bench(cli_args& args) {
  auto what = args.take_positional();
  if (what && *what == "model") return run_model_bench(args);
  if (what && *what == "serve") return run_serve_bench(args);
  if (what && *what == "moe") return run_moe_bench(args);
  if (what && *what == "cache") return run_cache_bench(args);
  if (what && *what == "model-cache") return run_model_cache_bench(args);
  if (what && *what == "resume") return run_resume_bench(args);
  if (what && *what == "mtp") return run_mtp_bench(args);
  if (what && *what == "scale") return run_scale_bench(args);
  if (what && *what == "kernels") {
    // The kernel benchmark parses its own options: hand it the rest as argv.
    std::vector<std::string> rest = args.take_rest();
    std::vector<char*> argv;
    for (auto& a : rest) argv.push_back(a.data());
    argv.push_back(nullptr);
    return run_kernel_bench(static_cast<int>(rest.size()), argv.data());
  }
  if (what && *what == "planes") {
    const bool quick = args.take_flag("--quick");
    const bool curve_only = args.take_flag("--curve-only");
    args.expect_consumed("bench planes");
    // The shm and zmq benchmarks fork: run them before anything here starts a thread.
    nlohmann::json out;
    if (!curve_only) {
      out["shm"] = run_shm_plane_bench(quick);
      out["zmq"] = run_zmq_plane_bench(quick);
    }
    out["zmq_curve"] = run_zmq_curve_bench(quick);
    if (!curve_only) out["inproc"] = run_inproc_plane_bench(quick);
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  throw usage_error("expected `bench cache`, `bench kernels`, `bench model`, `bench model-cache`, "
                    "`bench moe`, `bench mtp`, `bench resume`, "
                    "`bench planes`, `bench scale` or `bench serve` (`bench cache --help`, "
                    "`bench scale --help` and `bench serve --help` list their options)");
}

} // namespace supernode::apps
