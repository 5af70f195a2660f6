#include "services/chaos/chaos_report.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

namespace supernode::services::chaos {

namespace {

// Length of the longest span ref[k..j) (k < j) that received[i..] repeats; at the end of the
// stream a prefix of the span is enough (the stream broke mid-replay). 0 when none.
size_t replay_length(const std::vector<int32_t>& received, size_t i,
                     const std::vector<int32_t>& ref, size_t j) {
  const size_t left = received.size() - i;
  for (size_t k = 0; k < j; ++k) {
    const size_t span = j - k;
    const size_t compared = std::min(span, left);
    if (compared < span && i + compared != received.size()) continue;
    if (std::equal(ref.begin() + static_cast<std::ptrdiff_t>(k),
                   ref.begin() + static_cast<std::ptrdiff_t>(k + compared),
                   received.begin() + static_cast<std::ptrdiff_t>(i)))
      return compared;
  }
  return 0;
}

constexpr size_t max_mismatches_listed = 5;

enum phase : size_t { before_faults, during_faults, after_faults };

phase phase_of(const loadgen::request_outcome& o, double first_fault_s, double faults_end_s) {
  if (o.send_s < first_fault_s) return before_faults;
  if (o.send_s >= faults_end_s) return after_faults;
  return during_faults;
}

phase_latency phase_summary(const std::vector<const loadgen::request_outcome*>& of_phase) {
  phase_latency p;
  std::vector<double> ttft, tpot;
  for (const auto* o : of_phase) {
    ++p.requests;
    const auto m = loadgen::metrics_of(*o);
    if (m.ttft_ms) ttft.push_back(*m.ttft_ms);
    if (m.tpot_ms) tpot.push_back(*m.tpot_ms);
  }
  p.ttft_ms = loadgen::summarize(std::move(ttft));
  p.tpot_ms = loadgen::summarize(std::move(tpot));
  return p;
}

nlohmann::ordered_json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json percentiles_json(const phase_latency& p, const loadgen::latency_summary& s) {
  if (s.count == 0) return {{"requests", p.requests}, {"p50", nullptr}, {"p99", nullptr}};
  return {{"requests", p.requests}, {"p50", s.p50}, {"p99", s.p99}};
}

} // namespace

double fault_record::end_s() const {
  return std::max(at_s + duration_s, recovered_s.value_or(0.0));
}

int64_t duplicated_tokens(const std::vector<int32_t>& received,
                          const std::vector<int32_t>& reference) {
  int64_t duplicated = 0;
  size_t i = 0, j = 0;
  while (i < received.size()) {
    if (j < reference.size() && received[i] == reference[j]) {
      ++i, ++j;
      continue;
    }
    if (j == reference.size()) return duplicated + static_cast<int64_t>(received.size() - i);
    const size_t replayed = replay_length(received, i, reference, j);
    if (replayed == 0) break; // a divergence: a mismatch, not a duplicate
    duplicated += static_cast<int64_t>(replayed);
    i += replayed;
  }
  return duplicated;
}

chaos_report make_chaos_report(const std::vector<loadgen::request_outcome>& outcomes,
                               const std::vector<std::vector<int32_t>>& reference,
                               std::vector<fault_record> faults) {
  chaos_report r;
  r.faults = std::move(faults);
  double first_fault = std::numeric_limits<double>::infinity(), faults_end = first_fault;
  if (!r.faults.empty()) {
    faults_end = 0;
    for (const auto& f : r.faults) {
      first_fault = std::min(first_fault, f.at_s);
      faults_end = std::max(faults_end, f.end_s());
    }
  }
  std::array<std::vector<const loadgen::request_outcome*>, 3> by_phase;
  r.failures = loadgen::make_report(outcomes, 0, {}).failures;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const auto& o = outcomes[i];
    static const std::vector<int32_t> none;
    const auto& ref = i < reference.size() ? reference[i] : none;
    ++r.requests;
    if (o.retries > 0) ++r.retried;
    r.duplicated_tokens += duplicated_tokens(o.token_ids, ref);
    if (!o.ok) {
      ++r.failed;
      continue;
    }
    ++r.succeeded;
    if (o.token_ids != ref) {
      ++r.mismatched;
      if (r.mismatches.size() < max_mismatches_listed) {
        const auto diff =
            std::mismatch(o.token_ids.begin(), o.token_ids.end(), ref.begin(), ref.end());
        r.mismatches.push_back({i, static_cast<size_t>(diff.first - o.token_ids.begin()),
                                o.token_ids.size(), ref.size()});
      }
    }
    by_phase[phase_of(o, first_fault, faults_end)].push_back(&o);
  }
  r.before = phase_summary(by_phase[before_faults]);
  r.during = phase_summary(by_phase[during_faults]);
  r.after = phase_summary(by_phase[after_faults]);
  return r;
}

resume_stats resume_stats_of(const loadgen::metrics_snapshot& m) {
  resume_stats r;
  r.resumed = m.sum("supernode_requests_resumed_total");
  r.recovered = m.value("supernode_request_recovery_seconds_count").value_or(0);
  if (r.recovered > 0)
    r.mean_s = m.value("supernode_request_recovery_seconds_sum").value_or(0) / r.recovered;
  // Buckets are cumulative: the first bound holding 99 % of the observations.
  std::vector<std::pair<double, double>> buckets; // (le, count)
  for (const auto& s : m.samples()) {
    if (s.name != "supernode_request_recovery_seconds_bucket") continue;
    for (const auto& [key, value] : s.labels)
      if (key == "le" && value != "+Inf") buckets.emplace_back(std::stod(value), s.value);
  }
  std::sort(buckets.begin(), buckets.end());
  for (const auto& [le, count] : buckets)
    if (r.recovered > 0 && count >= 0.99 * r.recovered) {
      r.p99_bound_s = le;
      break;
    }
  return r;
}

nlohmann::ordered_json to_json(const chaos_report& r) {
  nlohmann::ordered_json out;
  out["requests"] = r.requests;
  out["succeeded"] = r.succeeded;
  out["failed"] = r.failed;
  out["mismatched"] = r.mismatched;
  out["duplicated_tokens"] = r.duplicated_tokens;
  out["retried"] = r.retried;
  out["resumed"] = {{"requests", r.resumes.resumed},
                    {"recovered", r.resumes.recovered},
                    {"mean_s", r.resumes.mean_s},
                    {"p99_bound_s", optional_json(r.resumes.p99_bound_s)}};
  auto& faults = out["faults"] = nlohmann::ordered_json::array();
  for (const auto& f : r.faults) {
    nlohmann::ordered_json j;
    j["kind"] = f.kind;
    j["target"] = f.target;
    j["at_s"] = f.at_s;
    j["duration_s"] = f.duration_s;
    j["detected_s"] = optional_json(f.detected_s);
    j["recovered_s"] = optional_json(f.recovered_s);
    if (!f.note.empty()) j["note"] = f.note;
    faults.push_back(std::move(j));
  }
  for (const char* metric : {"ttft_ms", "tpot_ms"}) {
    const bool ttft = metric[1] == 't';
    auto pick = [&](const phase_latency& p) {
      return percentiles_json(p, ttft ? p.ttft_ms : p.tpot_ms);
    };
    out[metric] = {
        {"before", pick(r.before)}, {"during", pick(r.during)}, {"after", pick(r.after)}};
  }
  auto& failures = out["failures"] = nlohmann::ordered_json::array();
  for (const auto& f : r.failures) failures.push_back({{"reason", f.reason}, {"count", f.count}});
  auto& mismatches = out["mismatches"] = nlohmann::ordered_json::array();
  for (const auto& m : r.mismatches)
    mismatches.push_back({{"request", m.request},
                          {"first_diff", m.first_diff},
                          {"received", m.received},
                          {"expected", m.expected}});
  return out;
}

std::string to_text(const chaos_report& r) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line,
                "requests %lld: %lld succeeded, %lld failed, %lld mismatched, %lld duplicated "
                "tokens, %lld retried\n",
                static_cast<long long>(r.requests), static_cast<long long>(r.succeeded),
                static_cast<long long>(r.failed), static_cast<long long>(r.mismatched),
                static_cast<long long>(r.duplicated_tokens), static_cast<long long>(r.retried));
  s += line;
  if (r.resumes.resumed > 0) {
    std::snprintf(line, sizeof line,
                  "resumed %.0f request(s); their streams went on %.3f s after the loss on "
                  "average\n",
                  r.resumes.resumed, r.resumes.mean_s);
    s += line;
  }
  auto opt = [](const std::optional<double>& v) {
    char b[32];
    if (!v) return std::string("-");
    std::snprintf(b, sizeof b, "%.2f s", *v);
    return std::string(b);
  };
  for (const auto& f : r.faults) {
    std::snprintf(line, sizeof line, "fault %-10s %-18s at %.2f s  detected %s  recovered %s%s%s\n",
                  f.kind.c_str(), f.target.c_str(), f.at_s, opt(f.detected_s).c_str(),
                  opt(f.recovered_s).c_str(), f.note.empty() ? "" : "  ", f.note.c_str());
    s += line;
  }
  auto phase = [&](const char* name, const phase_latency& p) {
    std::snprintf(line, sizeof line,
                  "%-7s %4lld requests  TTFT p50 %8.1f p99 %8.1f ms  TPOT p50 %7.2f p99 %7.2f ms\n",
                  name, static_cast<long long>(p.requests), p.ttft_ms.p50, p.ttft_ms.p99,
                  p.tpot_ms.p50, p.tpot_ms.p99);
    s += line;
  };
  phase("before", r.before);
  phase("during", r.during);
  phase("after", r.after);
  for (const auto& f : r.failures) {
    std::snprintf(line, sizeof line, "failed %lld: %s\n", static_cast<long long>(f.count),
                  f.reason.c_str());
    s += line;
  }
  s += r.clean() ? "clean: nothing lost, wrong or repeated\n" : "NOT clean\n";
  return s;
}

} // namespace supernode::services::chaos
