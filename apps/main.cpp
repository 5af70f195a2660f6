// supernode: the one binary. Subcommands live in cmd_*.cpp; this file only dispatches.

#include "apps/commands.hpp"
#include "apps/heap_huge_pages.hpp"
#include "kernels/thread_pool.hpp"
#include "log/log.hpp"

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

constexpr const char* usage = R"(usage: supernode <command> [options]

commands:
  generate    --model DIR (--prompt TEXT | --prompt-ids 1,2,3) --max-tokens N
              [--temperature T --top-p P --top-k K --seed S] [--precision int8|fp32] [--json]
  tokenize    --model DIR (--text TEXT | --chat FILE.json) [--no-bos] [--json]
  detokenize  --model DIR --ids 1,2,3 [--json]
  model make  --preset demo|tiny|small [--seed N] --out DIR [--dtype fp8|bf16]
              demo: the model trained in training/demo-model/; tiny, small: seeded noise
  model perplexity --model DIR --sequences FILE.json [--precision int8|fp32] [--json]
  serve       [--config FILE] [--model DIR] [--host H] [--port N] [--allow-unauthenticated]
              an OpenAI-compatible server; without --config every role runs in this process
              (configs/local.toml, embedded) on 127.0.0.1:8000 with the demo model; without
              [gateway] api_keys_file only a loopback host unless --allow-unauthenticated
  cluster up|status|down --config FILE [--model DIR] [--json: status]
              one process per process instance of FILE on this host under a supervisor that
              restarts them per [process.NAME] restart (logs, pid files, events.jsonl and
              supervisor.sock in its run_dir)
  cluster scale --config FILE PROCESS=COUNT... [--operation-id ID] [--drain-timeout-s N] [--json]
              the supervisor starts or drains slots of FILE's process kinds to reach the counts
              (at most each kind's configured count), and answers once they are serving or gone
  cluster keys --config FILE
              the CurveZMQ key pairs FILE's instances lack, made in its key folder (0700)
  chaos       --config FILE --faults PLAN.toml [--num-prompts N] [--concurrency C]
              [--max-tokens M] [--seed S] [--json] [--svg FILE]
              a fault-injection run: a load under the plan's faults (configs/faults/),
              every token checked against the reference engine (`supernode chaos --help`)
  compose     --config FILE [--network host|bridge|swarm] [--image NAME] [--models DIR] [--out FILE]
              a docker-compose file for FILE's shape (docker/compose/, docs/docker.md)
  health      --config FILE (--instance NAME | --process KIND)
              exit 0 when that instance's process here is serving (compose healthchecks)
  role NAME   --config FILE --id ID [--model DIR]
              one process of a cluster: the role instances that FILE's [process.NAME] lists
  config keys                 every table and key of a config file (docs/configuration.md)
  config check --config FILE  read FILE as every process would, starting nothing
  bench kernels [--threads N] [--quick] [--isa avx512_vnni,avx2] [--shapes a,b] [--m 1,8]
                [--int8-only] [--onednn-isa native|avx2|avx2_vnni|avx512_core_vnni]
                                            INT8/FP32 GEMM against oneDNN (native and capped at
                                            each path's ISA) and OpenBLAS
  bench kernels --expert-stream [--threads N] [--rounds R]
                                            batch-1 routed experts (grouped, and one call each)
                                            against lm_head's stream, in GB/s
  bench kernels --rms-norm [--rounds R]     RMSNorm on every kernel path, 1/8/512 rows of 1,024
  bench model   [--model DIR] [--quick]     decode step, prefill throughput, API-key check
  bench model   --expert-schedule [--model DIR]
                                            one MoE layer's experts, grouped GEMMs against one
                                            expert per thread, at 64 to 2,048 prompt tokens
  bench planes  [--quick] [--curve-only]    shm, zmq and inproc planes against raw baselines,
                                            and zmq with CurveZMQ on against off over tcp
  bench serve   [--url URL] ...             load generator against a running server
                                            (`supernode bench serve --help`)
  bench scale   --config FILE [--rate-schedule 0:1,60:6,180:1] ...
                                            the planner against fixed counts on a rate
                                            schedule (`supernode bench scale --help`)

global options: --threads N (compute threads; default all cores)
                --log-level trace|debug|info|warn|error|off (default info; SUPERNODE_LOG_LEVEL)
                --log-format text|json (default text; SUPERNODE_LOG_FORMAT)
                the log options may also come before the command; processes that this one
                starts (cluster up) inherit them
Without --model, commands use the demo model (models/demo), made on first use.
)";

bool is_log_option(const std::string& arg) {
  for (const char* name : {"--log-level", "--log-format"})
    if (arg == name || arg.rfind(std::string(name) + "=", 0) == 0) return true;
  return false;
}

// Takes --log-level and --log-format, applies them and exports them (with what the environment
// set) for the processes this one starts.
void apply_log_options(supernode::apps::cli_args& args) {
  namespace log = supernode::log;
  using supernode::apps::usage_error;
  if (auto v = args.take("--log-level")) {
    auto l = log::parse_level(*v);
    if (!l)
      throw usage_error("--log-level is trace, debug, info, warn, error or off, not '" + *v + "'");
    log::set_level(*l);
  }
  if (auto v = args.take("--log-format")) {
    auto f = log::parse_format(*v);
    if (!f) throw usage_error("--log-format is text or json, not '" + *v + "'");
    log::set_format(*f);
  }
  log::export_to_env();
}

} // namespace

int main(int argc, char** argv) {
  using namespace supernode::apps;
  reexec_with_huge_page_heap(argv);
  const auto& log = supernode::log::process();
  // Log options given before the command: `supernode --log-format json serve`.
  std::vector<std::string> leading;
  int first = 1;
  for (; first < argc && is_log_option(argv[first]); ++first) {
    leading.emplace_back(argv[first]);
    if (leading.back().find('=') == std::string::npos && first + 1 < argc)
      leading.emplace_back(argv[++first]);
  }
  try {
    supernode::log::configure_from_env();
    cli_args global(std::move(leading));
    apply_log_options(global);
  } catch (const std::exception& e) {
    log.error("{}", e.what());
    return 2;
  }
  if (first >= argc || std::string(argv[first]) == "--help" || std::string(argv[first]) == "help") {
    std::fputs(usage, first >= argc ? stderr : stdout);
    return first >= argc ? 2 : 0;
  }
  const std::string command = argv[first];
  try {
    cli_args args(argc, argv, first + 1);
    apply_log_options(args);
    // Benchmarks read --threads themselves (the kernel benchmark sizes its own pools).
    if (command != "bench")
      if (auto threads = args.take_int("--threads", 0, 0, 1024); threads > 0)
        supernode::kernels::thread_pool::configure_shared(static_cast<int>(threads));
    if (command == "generate") return cmd_generate(args);
    if (command == "tokenize") return cmd_tokenize(args);
    if (command == "detokenize") return cmd_detokenize(args);
    if (command == "model") return cmd_model(args);
    if (command == "bench") return cmd_bench(args);
    if (command == "role") return cmd_role(args);
    if (command == "serve") return cmd_serve(args);
    if (command == "cluster") return cmd_cluster(args);
    if (command == "config") return cmd_config(args);
    if (command == "chaos") return cmd_chaos(args);
    if (command == "compose") return cmd_compose(args);
    if (command == "health") return cmd_health(args);
    log.error("unknown command '{}'", command);
    std::fputs(usage, stderr);
    return 2;
  } catch (const usage_error& e) {
    log.error("{}: {}", command, e.what());
    return 2;
  } catch (const std::exception& e) {
    log.error("{}: error: {}", command, e.what());
    return 1;
  }
}
