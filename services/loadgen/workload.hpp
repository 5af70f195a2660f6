#pragma once
// The requests a serving benchmark sends: prompt and output lengths drawn from a distribution,
// prompts of random token ids that may share a common prefix, and Poisson arrival times. Every
// draw comes from --seed so two runs against two servers send exactly the same traffic.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace supernode::services::loadgen {

// A small, fully specified generator (splitmix64 seeding, xoshiro256**) with our own
// uniform/normal/exponential transforms: the standard library's distributions differ between
// implementations, and the traffic must not change with the compiler.
class random_stream {
public:
  explicit random_stream(uint64_t seed);
  uint64_t next_u64();
  // In [0, 1).
  double uniform01();
  // In [lo, hi].
  int64_t uniform_int(int64_t lo, int64_t hi);
  double normal(double mean, double sd);
  double exponential(double rate);

private:
  uint64_t s_[4];
};

struct length_distribution {
  enum class kind { fixed, uniform, normal };
  kind shape = kind::fixed;
  // fixed: a; uniform: integers in [a, b]; normal: mean a, standard deviation b.
  double a = 128;
  double b = 0;
};

// "128" (fixed), "uniform:64:256" or "normal:128:32". Throws std::invalid_argument saying what
// is wrong, so the CLI can pass the text on.
length_distribution parse_length_distribution(const std::string& spec);
std::string to_string(const length_distribution& d);

struct workload_spec {
  int64_t num_prompts = 100;
  length_distribution input{length_distribution::kind::fixed, 128, 0};
  length_distribution output{length_distribution::kind::fixed, 128, 0};
  // The first round(ratio * len) tokens of every prompt are the same tokens.
  double shared_prefix_ratio = 0;
  int64_t vocab = 129280;
  // Requests per second; infinity sends every request at time 0 (a closed loop under a
  // concurrency cap).
  double request_rate = std::numeric_limits<double>::infinity();
  uint64_t seed = 0;
};

struct planned_request {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 0;
  // Seconds after the start of the run at which the request becomes due.
  double arrival_s = 0;
};

// Token ids are drawn from [100, min(vocab, 128000)): low ids and DeepSeek-V3's special tokens
// (>= 128000) would make the server stop early or tokenize differently.
constexpr int32_t first_random_token = 100;
constexpr int32_t first_special_token = 128000;

std::vector<planned_request> make_workload(const workload_spec& spec);

// One length from d, never below 1. Exposed for tests.
int64_t draw_length(const length_distribution& d, random_stream& rng);

} // namespace supernode::services::loadgen
