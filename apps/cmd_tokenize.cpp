#include "apps/commands.hpp"
#include "model/chat_template.hpp"
#include "model/tokenizer.hpp"

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace supernode::apps {

namespace {
nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": invalid JSON: " + e.what());
  }
}
} // namespace

int cmd_tokenize(cli_args& args) {
  const auto dir = resolve_model_dir(args.take("--model"));
  auto text = args.take("--text");
  auto chat = args.take("--chat");
  const bool no_bos = args.take_flag("--no-bos");
  const bool json = args.take_flag("--json");
  args.expect_consumed("tokenize");
  if (text.has_value() == chat.has_value())
    throw usage_error("give exactly one of --text TEXT and --chat FILE.json");
  auto tok = model::tokenizer::load(dir);
  std::vector<int32_t> ids;
  if (text) {
    ids = tok.encode(*text, !no_bos);
  } else {
    // OpenAI-style: either {"messages": [...]} or the bare array of messages.
    auto j = read_json_file(*chat);
    const auto& messages = j.is_object() && j.contains("messages") ? j["messages"] : j;
    auto prompt = model::apply_chat_template(model::parse_chat_messages(messages), true,
                                             tok.decode(std::vector<int32_t>{tok.bos_id()}));
    ids = tok.encode(prompt, false);
  }
  if (json) {
    std::printf("%s\n", nlohmann::json({{"ids", ids}, {"count", ids.size()}}).dump().c_str());
    return 0;
  }
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ",%d" : "%d", ids[i]);
  std::printf("\n");
  return 0;
}

int cmd_detokenize(cli_args& args) {
  const auto dir = resolve_model_dir(args.take("--model"));
  auto ids_arg = args.take("--ids");
  const bool json = args.take_flag("--json");
  args.expect_consumed("detokenize");
  if (!ids_arg) throw usage_error("detokenize needs --ids 1,2,3");
  auto tok = model::tokenizer::load(dir);
  const std::string text = tok.decode(parse_id_list(*ids_arg, "--ids"));
  if (json)
    std::printf("%s\n", nlohmann::json({{"text", text}})
                            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                            .c_str());
  else
    std::printf("%s\n", text.c_str());
  return 0;
}

} // namespace supernode::apps
