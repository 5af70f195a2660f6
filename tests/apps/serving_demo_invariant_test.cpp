// The invariant on the trained demo model: served greedy tokens equal the reference engine's for
// English and Chinese text, one request at a time and eight at once, in one process, with
// prefill and decode disaggregated, and with the experts split over four EP ranks. A trained
// router's real expert-load skew and long runs of likely tokens are what seeded noise lacks.

#include "model/tokenizer.hpp"
#include "serving_fixture.hpp"

#include <gtest/gtest.h>
#include <thread>

using namespace supernode::testing;

namespace {

std::vector<served_prompt> demo_prompts() {
  auto tok = supernode::model::tokenizer::load(demo_model_dir());
  std::vector<served_prompt> out;
  for (const char* text : {"Once upon a time", "And God said, Let there be", "The LORD is my",
                           "床前明月光，", "学而时习之，", "天下"})
    out.push_back({tok.encode(text, true), 12});
  return out;
}

class serving_demo_invariant : public ::testing::TestWithParam<std::string> {};

} // namespace

TEST_P(serving_demo_invariant, greedy_tokens_equal_the_reference_alone_and_together) {
  serving_cluster cluster(GetParam(), demo_model_dir());
  ASSERT_TRUE(cluster.up()) << GetParam() << " did not start";
  const auto prompts = demo_prompts();
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto r = http_call(cluster.port(), "POST", "/v1/completions",
                       completion_body(prompts[i], i % 2, "demo"));
    auto got = answered_tokens(r);
    ASSERT_TRUE(got) << r.status << " " << r.body << r.error;
    EXPECT_EQ(*got, reference_tokens(prompts[i], demo_model_dir())) << "prompt " << i;
  }
  std::vector<http_reply> replies(prompts.size() + 2);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < replies.size(); ++i)
    clients.emplace_back([&, i] {
      replies[i] = http_call(cluster.port(), "POST", "/v1/completions",
                             completion_body(prompts[i % prompts.size()], i % 3 == 0, "demo"));
    });
  for (auto& t : clients) t.join();
  for (size_t i = 0; i < replies.size(); ++i) {
    auto got = answered_tokens(replies[i]);
    ASSERT_TRUE(got) << replies[i].status << " " << replies[i].body << replies[i].error;
    EXPECT_EQ(*got, reference_tokens(prompts[i % prompts.size()], demo_model_dir()))
        << "request " << i;
  }
}

TEST(serving_demo_mtp, drafts_are_accepted_and_max_tokens_and_stop_strings_land_inside_runs) {
  // Prefill and decode disaggregated, two drafts every step (not adaptive): the trained MTP
  // module's drafts of this repetitive text are mostly accepted, so a step emits runs of
  // tokens, and a max_tokens or a stop string falls inside them. Tokens and text stay those
  // of the reference engine without drafts. Drafts come from the 8,192 lowest ids
  // (mtp_draft_vocab), as a deployment whose head is most of its weights would run them.
  serving_cluster cluster("pdc-1p1d.toml", demo_model_dir(),
                          {{"decode", "mtp", "2"},
                           {"decode", "mtp_adaptive", "false"},
                           {"decode", "mtp_draft_vocab", "8192"}});
  ASSERT_TRUE(cluster.up());
  auto tok = supernode::model::tokenizer::load(demo_model_dir());
  const auto ids = tok.encode("In the beginning God created", true);
  for (int32_t max_tokens : {1, 2, 5, 7, 40}) {
    const served_prompt p{ids, max_tokens};
    auto r = http_call(cluster.port(), "POST", "/v1/completions",
                       completion_body(p, max_tokens % 2 == 1, "demo"));
    auto got = answered_tokens(r);
    ASSERT_TRUE(got) << r.status << " " << r.body << r.error;
    EXPECT_EQ(*got, reference_tokens(p, demo_model_dir())) << max_tokens << " tokens";
  }
  const auto [text, accepted] = poll_metrics(cluster.port(), [](const std::string& m) {
    return metric_sum(m, "supernode_mtp_accepted_tokens") > 10;
  });
  ASSERT_TRUE(accepted) << "the demo model's drafts were not accepted:\n" << text;

  const served_prompt whole{ids, 40};
  const auto want = tok.decode(reference_tokens(whole, demo_model_dir()), false, true);
  for (const std::string stop : {"God", "your", ","}) {
    const auto at = want.find(stop);
    ASSERT_TRUE(at != std::string::npos && at > 0) << stop << " in " << want;
    for (bool stream : {false, true}) {
      auto body = nlohmann::json::parse(completion_body(whole, stream, "demo"));
      body["stop"] = stop;
      auto r = http_call(cluster.port(), "POST", "/v1/completions", body.dump());
      ASSERT_EQ(r.status, 200u) << r.body;
      std::string got;
      if (stream) {
        for (auto& e : sse_data(r.body)) {
          if (e == "[DONE]") break;
          got += nlohmann::json::parse(e)["choices"][0]["text"].get<std::string>();
        }
      } else {
        got = nlohmann::json::parse(r.body)["choices"][0]["text"].get<std::string>();
      }
      EXPECT_EQ(got, want.substr(0, at)) << "stop " << stop << (stream ? " (stream)" : "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(configs, serving_demo_invariant,
                         ::testing::Values("local.toml", "pdc-1p1d.toml", "lep-ep4.toml"),
                         [](const auto& info) {
                           auto name = info.param.substr(0, info.param.find('.'));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });
