#include "apps/commands.hpp"
#include "model/checkpoint_maker.hpp"
#include "model/perplexity.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace supernode::apps {

std::filesystem::path resolve_model_dir(const std::optional<std::string>& model_arg) {
  if (model_arg) return *model_arg;
  const char* home = std::getenv("SUPERNODE_HOME");
  return model::ensure_checkpoint(std::filesystem::path(home ? home : ".") / "models" / "demo",
                                  "demo", 1);
}

namespace {

int model_make(cli_args& args) {
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

// Held-out perplexity with the engine: FILE.json holds {"sequences": [[ids...], ...]}, each
// sequence scored from its first token on (training/demo-model/evaluate.py writes one).
int model_perplexity(cli_args& args) {
  const auto dir = resolve_model_dir(args.take("--model"));
  auto file = args.take("--sequences");
  if (!file) throw usage_error("model perplexity needs --sequences FILE.json");
  const auto prec = model::parse_precision(args.take_or("--precision", "int8"));
  const bool json = args.take_flag("--json");
  args.expect_consumed("model perplexity");
  std::ifstream in(*file);
  if (!in) throw std::runtime_error("cannot open " + *file);
  const auto sequences =
      nlohmann::json::parse(in).at("sequences").get<std::vector<std::vector<int32_t>>>();
  model::load_options lo;
  lo.prec = prec;
  lo.load_mtp = false;
  lo.progress = !json;
  const auto s = model::score_sequences(model::model_weights::load(dir, lo), sequences);
  const double ppl = std::exp(s.nll / static_cast<double>(std::max<int64_t>(1, s.predicted)));
  const double top1 = static_cast<double>(s.top1_right) / std::max<int64_t>(1, s.predicted);
  if (json) {
    std::printf("%s\n", nlohmann::json({{"perplexity", ppl},
                                        {"tokens", s.predicted},
                                        {"nll", s.nll},
                                        {"top1_accuracy", top1},
                                        {"precision", model::precision_name(prec)}})
                            .dump()
                            .c_str());
  } else {
    std::printf("perplexity %.3f over %lld tokens (%s), top-1 accuracy %.4f\n", ppl,
                static_cast<long long>(s.predicted), model::precision_name(prec), top1);
  }
  return 0;
}

} // namespace

int cmd_model(cli_args& args) {
  auto sub = args.take_positional();
  if (sub && *sub == "make") return model_make(args);
  if (sub && *sub == "perplexity") return model_perplexity(args);
  throw usage_error("expected `model make --preset demo|tiny|small --seed N --out DIR` or "
                    "`model perplexity --model DIR --sequences FILE.json --precision int8|fp32`");
}

} // namespace supernode::apps
