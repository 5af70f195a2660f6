#include "apps/bench/scale_bench_report.hpp"

#include <algorithm>
#include <cmath>

namespace supernode::apps {

namespace lg = services::loadgen;
using json = nlohmann::ordered_json;

namespace {

std::optional<double> p90_of(std::vector<double> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  return lg::percentile(v, 90);
}

json optional_number(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}

json event_json(const scale_event& e) {
  json j{{"slot", e.slot},
         {"role", e.role},
         {"kind", !e.switched_to.empty() ? "switch"
                  : e.start              ? "start"
                                         : "drain"},
         {"command_s", e.command_s}};
  if (!e.switched_to.empty()) j["to"] = e.switched_to;
  auto since_command = [&](const std::optional<double>& t) {
    return t ? json(*t - e.command_s) : json(nullptr);
  };
  if (e.start) {
    j["to_ready_s"] = since_command(e.ready_s);
    j["to_first_served_s"] = since_command(e.first_served_s);
  } else {
    j["drain_s"] = since_command(e.gone_s);
  }
  return j;
}

} // namespace

std::vector<time_bin> bin_run(const scale_run_result& run, double bin_s) {
  const auto bins = static_cast<size_t>(std::max(1.0, std::ceil(run.duration_s / bin_s)));
  std::vector<time_bin> out(bins);
  std::vector<std::vector<double>> ttft(bins), tpot(bins);
  std::vector<double> tokens(bins, 0);
  auto bin_of = [&](double t) {
    return std::min(bins - 1, static_cast<size_t>(std::max(0.0, t / bin_s)));
  };
  for (const auto& r : run.outcomes) {
    for (double t : r.token_times_s) ++tokens[bin_of(t)];
    if (!r.ok) continue;
    const auto m = lg::metrics_of(r);
    if (m.ttft_ms) ttft[bin_of(r.end_s)].push_back(*m.ttft_ms);
    if (m.tpot_ms) tpot[bin_of(r.end_s)].push_back(*m.tpot_ms);
  }
  for (size_t i = 0; i < bins; ++i) {
    out[i].from_s = static_cast<double>(i) * bin_s;
    out[i].to_s = std::min(run.duration_s, out[i].from_s + bin_s);
    out[i].ttft_p90_ms = p90_of(ttft[i]);
    out[i].tpot_p90_ms = p90_of(tpot[i]);
    out[i].output_tokens_per_s = tokens[i] / std::max(1e-9, out[i].to_s - out[i].from_s);
  }
  return out;
}

double instance_seconds(const scale_run_result& run) {
  double total = 0;
  const auto& tl = run.timeline;
  for (size_t i = 0; i < tl.size(); ++i) {
    const double until = i + 1 < tl.size() ? tl[i + 1].t : std::max(tl[i].t, run.duration_s);
    total += (until - tl[i].t) * (tl[i].prefill + tl[i].decode);
  }
  return total;
}

json summarize_run(const scale_run_result& run, const lg::slo_targets& slo, double bin_s) {
  const auto report = lg::make_report(run.outcomes, run.duration_s, slo);
  const auto requests = static_cast<double>(run.outcomes.size());
  json j;
  j["name"] = run.name;
  j["requests"] = run.outcomes.size();
  j["failed"] = report.failed;
  j["slo_attainment"] = requests > 0 ? static_cast<double>(report.good_requests) / requests : 0.0;
  j["instance_seconds"] = instance_seconds(run);
  j["report"] = lg::to_json(report);
  j["events"] = json::array();
  for (const auto& e : run.events) j["events"].push_back(event_json(e));
  j["planner_log"] = run.planner_log;
  j["script"] = json::array();
  for (const auto& o : run.script) {
    const auto answer = json::parse(o.answer, nullptr, false);
    j["script"].push_back(
        {{"step", o.step.text},
         {"sent_s", o.sent_s},
         {"ok", answer.is_object() && answer.value("ok", false)},
         {"took_s",
          answer.is_object() && answer.contains("took_s") ? answer["took_s"] : json(nullptr)},
         {"answer", answer.is_discarded() ? json(o.answer) : answer}});
  }
  j["ep_reforms"] = json::array();
  for (const auto& r : run.ep_reforms)
    j["ep_reforms"].push_back({{"group", r.group},
                               {"epoch", r.epoch},
                               {"over", r.ranks},
                               {"at_s", r.first_s},
                               {"ranks_logged", r.lines},
                               {"switch_spread_ms", std::llround((r.last_s - r.first_s) * 1000)},
                               {"longest_rank_pause_ms", r.longest_rank_pause_ms},
                               {"pause_ms", r.pause_ms()}});
  j["timeline"] = json::array();
  for (const auto& m : run.timeline)
    j["timeline"].push_back({{"t", m.t},
                             {"prefill", m.prefill},
                             {"decode", m.decode},
                             {"prefill_serving", m.prefill_serving},
                             {"decode_serving", m.decode_serving}});
  j["bins"] = json::array();
  for (const auto& b : bin_run(run, bin_s))
    j["bins"].push_back({{"from_s", b.from_s},
                         {"to_s", b.to_s},
                         {"ttft_p90_ms", optional_number(b.ttft_p90_ms)},
                         {"tpot_p90_ms", optional_number(b.tpot_p90_ms)},
                         {"output_tokens_per_s", b.output_tokens_per_s}});
  return j;
}

} // namespace supernode::apps
