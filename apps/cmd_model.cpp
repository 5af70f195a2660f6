#include "apps/commands.hpp"
#include "model/checkpoint_maker.hpp"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

namespace supernode::apps {

std::filesystem::path resolve_model_dir(const std::optional<std::string>& model_arg) {
  if (model_arg) return *model_arg;
  const char* home = std::getenv("SUPERNODE_HOME");
  return model::ensure_checkpoint(std::filesystem::path(home ? home : ".") / "models" / "demo",
                                  "demo", 1);
}

int cmd_model(cli_args& args) {
  auto sub = args.take_positional();
  if (!sub || *sub != "make")
    throw usage_error("expected `model make --preset demo|tiny|small --seed N --out DIR`");
  model::make_options o;
  o.preset = args.take_or("--preset", "tiny");
  o.seed = static_cast<uint64_t>(args.take_int("--seed", 1, 0, INT64_MAX));
  auto out = args.take("--out");
  if (!out) throw usage_error("model make needs --out DIR");
  o.out = *out;
  const std::string dtype = args.take_or("--dtype", "fp8");
  if (dtype != "fp8" && dtype != "bf16")
    throw usage_error("--dtype must be fp8 or bf16, got '" + dtype + "'");
  o.fp8 = dtype == "fp8";
  if (auto t = args.take("--tokenizer-dir")) o.tokenizer_dir = *t;
  o.progress = !args.take_flag("--quiet");
  args.expect_consumed("model make");
  model::make_checkpoint(o);
  std::printf("%s\n", o.out.c_str());
  return 0;
}

} // namespace supernode::apps
