#include "apps/commands.hpp"
#include "model/engine.hpp"
#include "model/tokenizer.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

namespace supernode::apps {

int cmd_generate(cli_args& args) {
  const auto dir = resolve_model_dir(args.take("--model"));
  auto prompt_text = args.take("--prompt");
  auto prompt_ids = args.take("--prompt-ids");
  if (prompt_text.has_value() == prompt_ids.has_value())
    throw usage_error("give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
  model::generation_request req;
  req.max_tokens = static_cast<int32_t>(args.take_int("--max-tokens", 16, 0, 1 << 20));
  req.sampling.temperature = static_cast<float>(args.take_double("--temperature", 0.0, 0.0, 100.0));
  req.sampling.top_p = static_cast<float>(args.take_double("--top-p", 1.0, 1e-6, 1.0));
  req.sampling.top_k = static_cast<int32_t>(args.take_int("--top-k", 0, 0, 1 << 30));
  req.sampling.seed = static_cast<uint64_t>(args.take_int("--seed", 0, 0, INT64_MAX));
  req.stop_at_eos = !args.take_flag("--ignore-eos");
  const auto prec = model::parse_precision(args.take_or("--precision", "int8"));
  model::engine_options eo;
  eo.block_size = args.take_int("--block-size", 16, 1, 4096);
  eo.mtp_drafts = args.take_int("--mtp", 0, 0, 8);
  if (const auto rule = args.take("--mtp-sampling")) {
    if (*rule != "reproducible" && *rule != "standard")
      throw usage_error("--mtp-sampling takes reproducible or standard, not " + *rule);
    eo.mtp_acceptance = *rule == "standard" ? model::draft_acceptance::standard
                                            : model::draft_acceptance::reproducible;
  }
  eo.mtp_draft_vocab = args.take_int("--mtp-draft-vocab", 0, 0, int64_t{1} << 24);
  eo.mtp_draft_vocab_file = args.take_or("--mtp-draft-vocab-file", "");
  const bool json = args.take_flag("--json");
  args.expect_consumed("generate");

  auto tok = model::tokenizer::load(dir);
  req.prompt =
      prompt_text ? tok.encode(*prompt_text, true) : parse_id_list(*prompt_ids, "--prompt-ids");
  eo.max_context = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
  model::load_options lo;
  lo.prec = prec;
  lo.load_mtp = eo.mtp_drafts > 0;
  lo.progress = !json;
  model::reference_engine engine(model::model_weights::load(dir, lo), eo);
  auto res = engine.generate(req);
  const std::string text = tok.decode(res.tokens, false, /*skip_unknown=*/true);

  if (json) {
    nlohmann::json j = {{"prompt_tokens", req.prompt},
                        {"tokens", res.tokens},
                        {"text", text},
                        {"finish_reason", res.finish_reason},
                        {"precision", model::precision_name(prec)},
                        {"prefill_ms", res.prefill_ms},
                        {"decode_ms_per_token", res.decode_ms_per_token},
                        {"mtp_drafts", eo.mtp_drafts},
                        {"drafted_tokens", res.drafted_tokens},
                        {"accepted_tokens", res.accepted_tokens},
                        {"acceptance_rate", res.drafted_tokens > 0
                                                ? static_cast<double>(res.accepted_tokens) /
                                                      static_cast<double>(res.drafted_tokens)
                                                : 0.0}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf("prompt: %zu tokens\ntokens:", req.prompt.size());
  for (auto t : res.tokens) std::printf(" %d", t);
  std::printf("\ntext: %s\nfinish: %s\nprefill: %.1f ms, decode: %.2f ms/token (%s)\n",
              text.c_str(), res.finish_reason.c_str(), res.prefill_ms, res.decode_ms_per_token,
              model::precision_name(prec));
  if (eo.mtp_drafts > 0)
    std::printf("mtp: %lld drafted, %lld accepted (%.0f %%)\n",
                static_cast<long long>(res.drafted_tokens),
                static_cast<long long>(res.accepted_tokens),
                res.drafted_tokens > 0 ? 100.0 * static_cast<double>(res.accepted_tokens) /
                                             static_cast<double>(res.drafted_tokens)
                                       : 0.0);
  return 0;
}

} // namespace supernode::apps
