// supernode: the one binary. Subcommands live in cmd_*.cpp; this file only dispatches.

#include "apps/commands.hpp"
#include "kernels/thread_pool.hpp"

#include <cstdio>
#include <exception>
#include <string>

namespace {

constexpr const char* usage = R"(usage: supernode <command> [options]

commands:
  generate    --model DIR (--prompt TEXT | --prompt-ids 1,2,3) --max-tokens N
              [--temperature T --top-p P --top-k K --seed S] [--precision int8|fp32] [--json]
  tokenize    --model DIR (--text TEXT | --chat FILE.json) [--no-bos] [--json]
  detokenize  --model DIR --ids 1,2,3 [--json]
  model make  --preset tiny|small [--seed N] --out DIR [--dtype fp8|bf16]
  serve       [--config FILE] [--model DIR] [--host H] [--port N]
              an OpenAI-compatible server; without --config every role runs in this process
              (configs/local.toml, embedded) on 127.0.0.1:8000 with the demo model
  cluster up|status|down --config FILE [--model DIR]
              one process per process instance of FILE on this host (logs and pid files in
              its run_dir)
  role NAME   --config FILE --id ID [--model DIR]
              one process of a cluster: the role instances that FILE's [process.NAME] lists
  config keys                 every table and key of a config file (docs/configuration.md)
  config check --config FILE  read FILE as every process would, starting nothing
  bench kernels [--threads N] [--quick] [--isa avx512_vnni,avx2] [--shapes a,b] [--m 1,8]
                [--int8-only] [--onednn-isa native|avx2|avx2_vnni|avx512_core_vnni]
                                            INT8/FP32 GEMM against oneDNN (native and capped at
                                            each path's ISA) and OpenBLAS
  bench model   [--model DIR] [--quick]     decode step and prefill throughput
  bench planes  [--quick]                   shm, zmq and inproc planes against raw baselines
  bench serve   [--url URL] ...             load generator against a running server
                                            (`supernode bench serve --help`)

global options: --threads N (compute threads; default all cores)
Without --model, commands use the demo model (models/demo), made on first use.
)";

} // namespace

int main(int argc, char** argv) {
  using namespace supernode::apps;
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::fputs(usage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  try {
    cli_args args(argc, argv, 2);
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
    std::fprintf(stderr, "supernode: unknown command '%s'\n\n%s", command.c_str(), usage);
    return 2;
  } catch (const usage_error& e) {
    std::fprintf(stderr, "supernode %s: %s\n", command.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "supernode %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
}
