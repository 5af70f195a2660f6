// The MP servers of pdc-ems scaled 2 -> 3 -> 1 with `supernode cluster scale` under a continuous
// load whose every answer is checked against the reference engine (issue 15). mp_server-2 joins
// the live cluster (it is no slot of the config) and the blocks it now owns are handed to it
// before clients take the new ring; then mp_server-1 and -2 drain, hand their blocks to
// mp_server-0 and leave. The context cache's hit rate stays above half during each change, every
// block the pool acknowledged is a hit afterwards, and no request fails or differs.

#include "cluster_cli.hpp"
#include "serving_faults.hpp"

#include <atomic>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

using namespace supernode::testing;
using json = nlohmann::json;

namespace {

constexpr int64_t prompt_tokens = 96;
constexpr int64_t cache_block = 16; // [ems] block_tokens
// A prompt's tokens its cached blocks can give: every whole block but the one holding the
// last token, which prefill computes itself.
constexpr double hittable_tokens =
    static_cast<double>((prompt_tokens - 1) / cache_block) * cache_block;

served_prompt hot_prompt(int i) {
  return {test_prompt(prompt_tokens, 9000 + i), 6};
}
served_prompt fresh_prompt(int i) {
  return {test_prompt(prompt_tokens, 20000 + i), 6};
}

// Clients sending prompts back to back until stopped: mostly the hot prompts again (their KV
// blocks are in the pool), every sixth a fresh one (its blocks are stored during the changes).
class continuous_load {
public:
  continuous_load(uint16_t port, std::vector<served_prompt> hot, std::vector<served_prompt> fresh)
      : port_(port), hot_(std::move(hot)), fresh_(std::move(fresh)) {
    for (auto& p : hot_) (void)reference_tokens(p); // before the clock runs
    for (auto& p : fresh_) (void)reference_tokens(p);
    for (int t = 0; t < 3; ++t) clients_.emplace_back([this] { run(); });
  }
  ~continuous_load() { stop(); }

  void stop() {
    stop_ = true;
    for (auto& c : clients_)
      if (c.joinable()) c.join();
  }
  size_t answered() const { return answered_; }
  size_t failed() const { return failed_; }
  size_t mismatched() const { return mismatched_; }
  std::string first_problem() const {
    std::lock_guard lock(mutex_);
    return problem_;
  }
  // Every prompt sent at least once: the hot ones and the fresh ones used.
  std::vector<served_prompt> sent() const {
    auto out = hot_;
    out.insert(out.end(), fresh_.begin(),
               fresh_.begin() +
                   static_cast<std::ptrdiff_t>(std::min(fresh_next_.load(), fresh_.size())));
    return out;
  }

private:
  void run() {
    while (!stop_) {
      const size_t n = next_++;
      const served_prompt* p = &hot_[n % hot_.size()];
      if (n % 6 == 5)
        if (const size_t f = fresh_next_++; f < fresh_.size()) p = &fresh_[f];
      const auto reply = http_call(port_, "POST", "/v1/completions", completion_body(*p, n % 2),
                                   std::chrono::seconds(120));
      const auto got = answered_tokens(reply);
      std::lock_guard lock(mutex_);
      if (!got) {
        ++failed_;
        if (problem_.empty())
          problem_ = std::to_string(reply.status) + " " + reply.body + reply.error;
      } else if (*got != reference_tokens(*p)) {
        ++mismatched_;
        if (problem_.empty()) problem_ = "request " + std::to_string(n) + " differs";
      } else {
        ++answered_;
      }
    }
  }

  uint16_t port_;
  std::vector<served_prompt> hot_, fresh_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> next_{0}, fresh_next_{0}, answered_{0}, failed_{0}, mismatched_{0};
  mutable std::mutex mutex_;
  std::string problem_;
  std::vector<std::thread> clients_;
};

struct cache_counts {
  double lookups = 0, hit_tokens = 0, store_failures = 0;
};
cache_counts cache_counts_of(const std::string& metrics) {
  return {metric_sum(metrics, "supernode_cache_lookups"),
          metric_sum(metrics, "supernode_cache_hit_tokens"),
          metric_sum(metrics, "supernode_cache_store_failures")};
}
cache_counts cache_counts_now(const serving_cluster& cluster) {
  return cache_counts_of(http_call(cluster.port(), "GET", "/metrics").body);
}
// The counts once a change is over: the prefill instances' lookups reach /metrics with their
// load reports, a heartbeat or two late, so a change shorter than that (a hand-over of a few
// hundred ms) can show none yet. The window then ends once at least three lookups made since
// `before` are counted (the load goes on meanwhile).
cache_counts counts_after(const serving_cluster& cluster, const cache_counts& before) {
  const auto [text, counted] = poll_metrics(cluster.port(), [&](const std::string& m) {
    return cache_counts_of(m).lookups >= before.lookups + 3;
  });
  EXPECT_TRUE(counted) << "no lookups counted after the change: " << text;
  return cache_counts_of(text);
}

// Hit tokens over what the prompts looked up between two readings could have hit.
double hit_rate(const cache_counts& from, const cache_counts& to) {
  return (to.hit_tokens - from.hit_tokens) / ((to.lookups - from.lookups) * hittable_tokens);
}

std::string controller_log(const serving_cluster& cluster) {
  std::stringstream log;
  log << std::ifstream(cluster.run_dir() / "logs" / "ems_controller-0.log").rdbuf();
  return log.str();
}
// The controller's "ring version V published after a hand-over of N blocks in T ms" lines.
std::vector<std::pair<long, long>> handovers(const std::string& log) {
  static const std::regex line("published after a hand-over of ([0-9]+) blocks in ([0-9]+) ms");
  std::vector<std::pair<long, long>> out;
  for (std::sregex_iterator it(log.begin(), log.end(), line), end; it != end; ++it)
    out.emplace_back(std::stol((*it)[1]), std::stol((*it)[2]));
  return out;
}
void wait_for_handovers(const serving_cluster& cluster, size_t n) {
  const auto [text, done] = poll_metrics(
      cluster.port(),
      [&](const std::string&) { return handovers(controller_log(cluster)).size() >= n; },
      std::chrono::seconds(60));
  ASSERT_TRUE(done) << controller_log(cluster);
}

double handed_over(const std::string& metrics, const std::string& server, const char* direction) {
  return metric(metrics, "supernode_pool_handed_over_blocks",
                {{"instance", server}, {"direction", direction}})
      .value_or(0);
}

} // namespace

TEST(serving_ems_scale, mp_servers_two_to_three_to_one_under_load_keep_their_blocks_and_hits) {
  serving_cluster cluster("pdc-ems.toml", tiny_model_dir(),
                          {{"ems", "block_tokens", std::to_string(cache_block)}});
  ASSERT_TRUE(cluster.up());
  std::vector<served_prompt> hot, fresh;
  for (int i = 0; i < 12; ++i) hot.push_back(hot_prompt(i));
  for (int i = 0; i < 40; ++i) fresh.push_back(fresh_prompt(i));
  // The hot prompts once, so the pool holds their blocks (stored after each first token).
  for (auto& p : hot) {
    const auto r = http_call(cluster.port(), "POST", "/v1/completions", completion_body(p));
    ASSERT_EQ(answered_tokens(r), reference_tokens(p)) << r.status << " " << r.body;
  }
  const double blocks_per_prompt = hittable_tokens / cache_block;
  auto [stored, all_stored] = poll_metrics(cluster.port(), [&](const std::string& m) {
    return metric_sum(m, "supernode_cache_stored_blocks") >=
           static_cast<double>(hot.size()) * blocks_per_prompt;
  });
  ASSERT_TRUE(all_stored) << stored;
  const auto start = cache_counts_of(stored);

  continuous_load load(cluster.port(), hot, fresh);
  ASSERT_TRUE(poll_metrics(cluster.port(), [&](const std::string& m) {
                return cache_counts_of(m).lookups >= start.lookups + 6;
              }).second);

  // 2 -> 3: ems-2 is past the config's slots, so it joins (`role ems --join`) as mp_server-2.
  const auto before_join = cache_counts_now(cluster);
  const auto up = scale(cluster, {"ems=3"});
  ASSERT_EQ(up["ok"], true) << up.dump();
  EXPECT_EQ(up["started"], json::array({"ems-2"}));
  wait_for_handovers(cluster, 1);
  const auto after_join = counts_after(cluster, before_join);

  // 3 -> 1: mp_server-1 and -2 drain together, hand their blocks to mp_server-0 and leave.
  const auto before_leave = cache_counts_now(cluster);
  const auto down = scale(cluster, {"ems=1"});
  ASSERT_EQ(down["ok"], true) << down.dump();
  EXPECT_EQ(down["stopped"], json::array({"ems-1", "ems-2"}));
  EXPECT_EQ(down["drain_killed"], false) << "the hand-over ended within the drain timeout";
  wait_for_handovers(cluster, 2);
  const auto after_leave = counts_after(cluster, before_leave);
  load.stop();

  EXPECT_EQ(load.failed(), 0u) << load.first_problem();
  EXPECT_EQ(load.mismatched(), 0u) << load.first_problem();
  EXPECT_GT(load.answered(), 0u);
  ASSERT_GE(after_join.lookups - before_join.lookups, 3.0) << "too few lookups during the join";
  ASSERT_GE(after_leave.lookups - before_leave.lookups, 3.0) << "too few lookups during the leave";
  const double join_rate = hit_rate(before_join, after_join);
  const double leave_rate = hit_rate(before_leave, after_leave);
  EXPECT_GT(join_rate, 0.5);
  EXPECT_GT(leave_rate, 0.5);

  // The counts reach /metrics with each server's next load report, a heartbeat or two after
  // the controller logged the change.
  const auto [metrics, counted_in] = poll_metrics(cluster.port(), [](const std::string& m) {
    return handed_over(m, "mp_server-2", "in") > 0 && handed_over(m, "mp_server-0", "in") > 0;
  });
  EXPECT_TRUE(counted_in) << "blocks handed over to mp_server-2 and mp_server-0: " << metrics;
  const auto now = phases(cluster);
  EXPECT_EQ(now.at("ems-0"), "serving");
  EXPECT_EQ(now.at("ems-1"), "down");
  EXPECT_EQ(now.at("ems-2"), "down");

  // Every block the pool acknowledged is served by the one server left: each prompt sent once
  // more hits all its whole blocks (a put the pool refused or never answered was not
  // acknowledged: its block may be missing).
  const auto sent = load.sent();
  // The baseline once /metrics counts every lookup the load made (one per request): the
  // prefill instances' counters arrive with their load reports, a heartbeat or two late, and a
  // late lookup of the load counted as one of the reread's would stand in for a reread hit.
  const double load_requests =
      static_cast<double>(load.answered() + load.failed() + load.mismatched());
  const auto [settled_text, settled] = poll_metrics(cluster.port(), [&](const std::string& m) {
    return cache_counts_of(m).lookups >= start.lookups + load_requests;
  });
  ASSERT_TRUE(settled) << settled_text;
  const auto before_reread = cache_counts_of(settled_text);
  for (auto& p : sent) {
    const auto r = http_call(cluster.port(), "POST", "/v1/completions", completion_body(p));
    ASSERT_EQ(answered_tokens(r), reference_tokens(p)) << r.status << " " << r.body;
  }
  const auto [text, counted] = poll_metrics(cluster.port(), [&](const std::string& m) {
    return cache_counts_of(m).lookups >= before_reread.lookups + static_cast<double>(sent.size());
  });
  ASSERT_TRUE(counted) << text;
  const auto reread = cache_counts_of(text);
  const double unacknowledged = reread.store_failures - start.store_failures;
  EXPECT_GE(reread.hit_tokens - before_reread.hit_tokens,
            static_cast<double>(sent.size()) * hittable_tokens - unacknowledged * cache_block)
      << "blocks acknowledged before or during the changes are gone";
  expect_serves_the_reference(cluster);

  const auto moved = handovers(controller_log(cluster));
  std::cout << "MP servers 2 -> 3 -> 1 under load (" << load.answered() << " requests): hit rate "
            << join_rate << " during the join, " << leave_rate << " during the leave; ";
  for (auto& [blocks, ms] : moved)
    std::cout << blocks << " blocks handed over in " << ms << " ms; ";
  std::cout << "unacknowledged puts " << unacknowledged << "\n";
}
