#pragma once
// What the serving tests share: the test models' reference tokens, requests as JSON, and
// reading the answers (token ids through the vLLM-style `return_token_ids`, /metrics values).

#include "../model/tiny_model.hpp"
#include "../support/eventually.hpp"
#include "../support/http_client.hpp"
#include "../support/serving_cluster.hpp"
#include "model/engine.hpp"
#include "services/loadgen/prometheus_text.hpp"

#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace supernode::testing {

struct served_prompt {
  std::vector<int32_t> ids;
  int32_t max_tokens = 6;
  float temperature = 0.0f; // above 0: seeded sampling
  uint64_t seed = 0;
};

// Reference tokens of a test model in INT8, the tiny one unless told (greedy, or sampled with the
// prompt's seed), computed once per prompt.
inline std::vector<int32_t>
reference_tokens(const served_prompt& p, const std::filesystem::path& model = tiny_model_dir()) {
  static std::mutex mutex;
  using key_type = std::tuple<std::string, std::vector<int32_t>, int32_t, float, uint64_t>;
  static std::map<key_type, std::vector<int32_t>> cache;
  static std::map<std::filesystem::path, std::unique_ptr<model::reference_engine>> engines;
  std::lock_guard lock(mutex);
  auto key = key_type(model.string(), p.ids, p.max_tokens, p.temperature, p.seed);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  auto& engine = engines[model];
  if (!engine)
    engine = std::make_unique<model::reference_engine>(
        test_model_weights(model, model::precision::int8));
  model::generation_request r;
  r.prompt = p.ids;
  r.max_tokens = p.max_tokens;
  r.sampling.temperature = p.temperature;
  r.sampling.seed = p.seed;
  return cache[key] = engine->generate(r).tokens;
}

// `model` is the served model's name: its folder's name.
inline std::string completion_body(const served_prompt& p, bool stream = false,
                                   const std::string& model = "tiny") {
  nlohmann::json j = {{"model", model},
                      {"prompt", p.ids},
                      {"max_tokens", p.max_tokens},
                      {"temperature", p.temperature},
                      {"return_token_ids", true},
                      {"stream", stream}};
  if (p.temperature > 0) j["seed"] = p.seed;
  return j.dump();
}

// Token ids of a completion answer, streamed or not; nothing when the answer is not a success.
inline std::optional<std::vector<int32_t>> answered_tokens(const http_reply& r) {
  if (r.status != 200) return std::nullopt;
  std::vector<int32_t> ids;
  if (r.content_type.find("text/event-stream") != std::string::npos) {
    for (auto& data : sse_data(r.body)) {
      if (data == "[DONE]") return ids;
      auto j = nlohmann::json::parse(data);
      if (!j.contains("choices") || j["choices"].empty()) continue;
      for (auto id : j["choices"][0].value("token_ids", std::vector<int32_t>{})) ids.push_back(id);
    }
    return std::nullopt; // no [DONE]
  }
  auto j = nlohmann::json::parse(r.body);
  return j["choices"][0]["token_ids"].get<std::vector<int32_t>>();
}

// The value of one series of /metrics, e.g. metric(text, "supernode_kv_blocks_used",
// {{"instance", "decode-0"}}); nothing when absent.
inline std::optional<double> metric(const std::string& text, const std::string& name,
                                    const services::loadgen::metric_labels& labels = {}) {
  return services::loadgen::metrics_snapshot(text).value(name, labels);
}

// The sum of every series of `name` (one per instance); 0 when there is none.
inline double metric_sum(const std::string& text, const std::string& name) {
  return services::loadgen::metrics_snapshot(text).sum(name);
}

// Polls /metrics until `done(text)` holds or `timeout` passes; returns the last text and whether
// it held. Paced at 20 ms: the gateway bounds its connections, and a loaded machine closes them
// more slowly than a tight loop opens them (the pace is not what anything waits on).
template<class Done>
std::pair<std::string, bool> poll_metrics(int port, Done done,
                                          std::chrono::seconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string text;
  for (;;) {
    text = http_call(port, "GET", "/metrics").body;
    if (done(text)) return {text, true};
    if (std::chrono::steady_clock::now() >= deadline) return {text, false};
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Every process log of a multi-process cluster, to search.
inline std::string read_logs(const std::filesystem::path& run_dir) {
  std::string all;
  for (auto& f : std::filesystem::directory_iterator(run_dir / "logs")) {
    std::ifstream in(f.path());
    all += "---- " + f.path().filename().string() + "\n";
    all.append(std::istreambuf_iterator<char>(in), {});
  }
  return all;
}

// Whether `text` shows up in the cluster's logs within `timeout`: a restart or a re-formation
// may still be under way. The logs are read every 50 ms, not every millisecond: whole logs are
// large, and reading them must not starve the cluster of the cores it runs on.
inline bool logs_eventually_contain(
    const std::filesystem::path& run_dir, const std::string& text,
    std::chrono::milliseconds timeout = scaled(std::chrono::milliseconds(60000))) {
  return eventually([&] { return read_logs(run_dir).find(text) != std::string::npos; }, timeout,
                    std::chrono::milliseconds(50));
}

// The last `n` lines of `file` that `keep` accepts, and how many earlier ones it left out.
template<class Keep>
std::pair<std::deque<std::string>, size_t> last_lines(const std::filesystem::path& file, size_t n,
                                                      Keep keep) {
  std::ifstream in(file);
  std::deque<std::string> kept;
  size_t dropped = 0;
  for (std::string line; std::getline(in, line);) {
    if (!keep(line)) continue;
    kept.push_back(std::move(line));
    if (kept.size() > n) {
      kept.pop_front();
      ++dropped;
    }
  }
  return {std::move(kept), dropped};
}

// What a failure message shows of the logs: per process, its last `per_process` warnings,
// errors and group and restart events, then the supervisor's last events. Whole logs of a cluster
// under load run to megabytes, and a CI report keeps only a part of what a failing test prints.
inline std::string log_digest(const std::filesystem::path& run_dir, size_t per_process = 40) {
  // With the marks a process leaves when it aborts (an uncaught exception, a failed check).
  static const char* const notable[] = {" WARN ",      " ERROR ",   "formed",    "fenced",
                                        "restart",     "exited",    "ready",     "terminate",
                                        "what():",     "Assertion", "Sanitizer", "runtime error",
                                        "double free", "corrupted"};
  auto is_notable = [](const std::string& line) {
    for (const char* word : notable)
      if (line.find(word) != std::string::npos) return true;
    return false;
  };
  std::string digest;
  auto add = [&](const std::string& title, const std::deque<std::string>& lines, size_t dropped) {
    digest += "---- " + title;
    if (dropped) digest += " (" + std::to_string(dropped) + " earlier lines left out)";
    digest += "\n";
    for (auto& line : lines) digest += line + "\n";
  };
  for (auto& f : std::filesystem::directory_iterator(run_dir / "logs")) {
    auto [lines, dropped] = last_lines(f.path(), per_process, is_notable);
    add(f.path().filename().string(), lines, dropped);
  }
  // The supervisor's events (exits, restarts, scale operations), every kind.
  auto [events, dropped] =
      last_lines(run_dir / "events.jsonl", per_process, [](const std::string&) { return true; });
  add("events.jsonl", events, dropped);
  return digest;
}

} // namespace supernode::testing
