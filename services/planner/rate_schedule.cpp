#include "services/planner/rate_schedule.hpp"

#include "services/loadgen/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>

namespace supernode::services::planner {

namespace {

// The whole of `text` as a finite number, or nothing.
bool read_number(std::string_view text, double& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(out);
}

} // namespace

rate_schedule rate_schedule::parse(std::string_view text) {
  if (text.empty())
    throw std::invalid_argument("--rate-schedule is empty; expected seconds:rate,... such as "
                                "0:1,60:6,180:1");
  rate_schedule schedule;
  size_t position = 0;
  std::string_view previous;
  for (size_t start = 0; start <= text.size(); ++position) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view element = text.substr(start, comma - start);
    start = comma + 1;
    const std::string where = "--rate-schedule element " + std::to_string(position + 1) + " \"" +
                              std::string(element) + "\"";
    const size_t colon = element.find(':');
    if (colon == std::string_view::npos)
      throw std::invalid_argument(where + " is not seconds:rate");
    rate_step step;
    if (!read_number(element.substr(0, colon), step.from_s) || step.from_s < 0)
      throw std::invalid_argument(where + ": the time must be a number of seconds >= 0");
    if (!read_number(element.substr(colon + 1), step.rate) || step.rate < 0)
      throw std::invalid_argument(where + ": the rate must be a number of requests/s >= 0");
    if (schedule.steps_.empty() && step.from_s != 0)
      throw std::invalid_argument(where + ": the first step must start at 0");
    if (!schedule.steps_.empty() && step.from_s <= schedule.steps_.back().from_s)
      throw std::invalid_argument(where + ": times must increase strictly, and \"" +
                                  std::string(previous) + "\" is not earlier");
    schedule.steps_.push_back(step);
    previous = element;
    if (comma == text.size()) break;
  }
  return schedule;
}

double rate_schedule::rate_at(double seconds) const {
  double rate = steps_.front().rate;
  for (const auto& step : steps_) {
    if (step.from_s > seconds) break;
    rate = step.rate;
  }
  return rate;
}

rate_schedule rate_schedule::scaled(double factor) const {
  if (!(factor > 0)) throw std::invalid_argument("a schedule's time factor must be > 0");
  rate_schedule out = *this;
  for (auto& step : out.steps_) step.from_s *= factor;
  return out;
}

std::vector<double> rate_schedule::arrivals(double duration_s, uint64_t seed) const {
  loadgen::random_stream rng(seed);
  std::vector<double> out;
  for (size_t i = 0; i < steps_.size() && steps_[i].from_s < duration_s; ++i) {
    const double end =
        i + 1 < steps_.size() ? std::min(steps_[i + 1].from_s, duration_s) : duration_s;
    if (steps_[i].rate <= 0) continue;
    // Memoryless: a step's arrivals start afresh at its beginning.
    for (double t = steps_[i].from_s + rng.exponential(steps_[i].rate); t < end;
         t += rng.exponential(steps_[i].rate))
      out.push_back(t);
  }
  return out;
}

} // namespace supernode::services::planner
