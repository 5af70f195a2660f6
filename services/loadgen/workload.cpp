#include "services/loadgen/workload.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <sstream>
#include <stdexcept>

namespace supernode::services::loadgen {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

double parse_number(const std::string& text, const std::string& spec) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || !std::isfinite(v))
    throw std::invalid_argument("bad number '" + text + "' in length spec '" + spec + "'");
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!s.empty() && s.back() == sep) parts.emplace_back();
  return parts;
}

// Separate streams per purpose, so that e.g. changing --request-rate leaves the prompts alone.
enum class stream_purpose : uint64_t { lengths = 1, tokens = 2, arrivals = 3 };

random_stream stream_for(uint64_t seed, stream_purpose purpose) {
  return random_stream(seed * 0x100000001b3ull + static_cast<uint64_t>(purpose));
}

} // namespace

random_stream::random_stream(uint64_t seed) {
  for (auto& word : s_) word = splitmix64(seed);
}

uint64_t random_stream::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double random_stream::uniform01() {
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

int64_t random_stream::uniform_int(int64_t lo, int64_t hi) {
  const auto span = static_cast<uint64_t>(hi - lo) + 1;
  // Lemire's multiply-shift; the bias is below 2^-40 for every span we use.
  const auto wide = static_cast<unsigned __int128>(next_u64()) * span;
  return lo + static_cast<int64_t>(wide >> 64);
}

double random_stream::normal(double mean, double sd) {
  // Box-Muller; 1 - u keeps the logarithm finite.
  const double u1 = 1.0 - uniform01(), u2 = uniform01();
  return mean + sd * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double random_stream::exponential(double rate) {
  return -std::log(1.0 - uniform01()) / rate;
}

length_distribution parse_length_distribution(const std::string& spec) {
  const auto parts = split(spec, ':');
  length_distribution d;
  if (parts.size() == 1) {
    d = {length_distribution::kind::fixed, parse_number(parts[0], spec), 0};
  } else if (parts.size() == 3 && parts[0] == "uniform") {
    d = {length_distribution::kind::uniform, parse_number(parts[1], spec),
         parse_number(parts[2], spec)};
    if (d.a > d.b) throw std::invalid_argument("uniform:A:B needs A <= B in '" + spec + "'");
  } else if (parts.size() == 3 && parts[0] == "normal") {
    d = {length_distribution::kind::normal, parse_number(parts[1], spec),
         parse_number(parts[2], spec)};
    if (d.b < 0) throw std::invalid_argument("normal:MEAN:SD needs SD >= 0 in '" + spec + "'");
  } else {
    throw std::invalid_argument("length spec '" + spec +
                                "' is not N, uniform:MIN:MAX or normal:MEAN:SD");
  }
  if (d.shape != length_distribution::kind::normal && d.a < 1)
    throw std::invalid_argument("lengths must be at least 1 in '" + spec + "'");
  if (d.shape != length_distribution::kind::normal &&
      (d.a != std::floor(d.a) || d.b != std::floor(d.b)))
    throw std::invalid_argument("fixed and uniform lengths must be integers in '" + spec + "'");
  return d;
}

std::string to_string(const length_distribution& d) {
  auto num = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  switch (d.shape) {
  case length_distribution::kind::fixed:
    return num(d.a);
  case length_distribution::kind::uniform:
    return "uniform:" + num(d.a) + ":" + num(d.b);
  case length_distribution::kind::normal:
    return "normal:" + num(d.a) + ":" + num(d.b);
  }
  return "?";
}

int64_t draw_length(const length_distribution& d, random_stream& rng) {
  switch (d.shape) {
  case length_distribution::kind::fixed:
    return std::max<int64_t>(1, std::llround(d.a));
  case length_distribution::kind::uniform:
    return std::max<int64_t>(1,
                             rng.uniform_int(static_cast<int64_t>(d.a), static_cast<int64_t>(d.b)));
  case length_distribution::kind::normal:
    return std::max<int64_t>(1, std::llround(rng.normal(d.a, d.b)));
  }
  return 1;
}

std::vector<planned_request> make_workload(const workload_spec& spec) {
  if (spec.num_prompts < 0) throw std::invalid_argument("num_prompts must be >= 0");
  if (!(spec.shared_prefix_ratio >= 0 && spec.shared_prefix_ratio <= 1))
    throw std::invalid_argument("shared_prefix_ratio must be in [0, 1]");
  if (!(spec.request_rate > 0)) throw std::invalid_argument("request_rate must be > 0");
  const int32_t token_end =
      static_cast<int32_t>(std::min<int64_t>(spec.vocab, first_special_token));
  if (token_end <= first_random_token)
    throw std::invalid_argument("vocab must exceed " + std::to_string(first_random_token));

  auto lengths = stream_for(spec.seed, stream_purpose::lengths);
  auto tokens = stream_for(spec.seed, stream_purpose::tokens);
  auto arrivals = stream_for(spec.seed, stream_purpose::arrivals);
  auto random_token = [&] {
    return static_cast<int32_t>(tokens.uniform_int(first_random_token, token_end - 1));
  };

  std::vector<planned_request> out(static_cast<size_t>(spec.num_prompts));
  for (auto& r : out) {
    r.prompt.resize(static_cast<size_t>(draw_length(spec.input, lengths)));
    r.max_tokens = draw_length(spec.output, lengths);
  }

  size_t longest = 0;
  for (const auto& r : out) longest = std::max(longest, r.prompt.size());
  std::vector<int32_t> prefix(longest);
  for (auto& t : prefix) t = random_token();
  for (auto& r : out) {
    const auto shared = static_cast<size_t>(
        std::llround(spec.shared_prefix_ratio * static_cast<double>(r.prompt.size())));
    std::copy_n(prefix.begin(), shared, r.prompt.begin());
    for (size_t i = shared; i < r.prompt.size(); ++i) r.prompt[i] = random_token();
  }

  // Poisson process: independent exponential gaps with mean 1 / rate after a first request at
  // time 0, as vLLM's benchmark_serving.py schedules them.
  double t = 0;
  for (auto& r : out) {
    r.arrival_s = t;
    if (std::isfinite(spec.request_rate)) t += arrivals.exponential(spec.request_rate);
  }
  return out;
}

} // namespace supernode::services::loadgen
