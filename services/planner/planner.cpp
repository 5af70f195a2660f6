#include "services/planner/planner.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <utility>

namespace supernode::services::planner {

namespace {

std::string number(const char* format, double v) {
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

std::string latency(const std::optional<double>& p90, int64_t target) {
  return (p90 ? number("%.0f ms", *p90) : std::string("none")) + " (target " +
         std::to_string(target) + " ms)";
}

// One role as the rules see it.
struct role_view {
  role_view(std::string role, int serving, int fewest, int most)
      : name(std::move(role)), count(serving), min(fewest), max(most) {}

  std::string name; // "prefill", "decode"
  int count = 0;    // serving
  int min = 0, max = 0;
  bool hot = false;    // over its target: wants one more instance
  bool spare = false;  // well under its target with light load: may give one away by a switch
  bool cold = false;   // spare and nothing queued: may be scaled down
  double pressure = 0; // p90 / target (or KV usage / kv_high): the worse role is helped first
  std::string why;     // what made it hot or cold, with the numbers
};

// What several rules read of one sample.
struct situation {
  int64_t cap = 0;               // the decode batch cap now
  std::optional<int> new_cap;    // the cap to set, when it moves
  bool lowering_cap = false;     // new_cap < cap
  bool queue_growing = false;    // more queued than at the last evaluation
  bool decode_saturated = false; // every decode slot taken: the queue waits for decode
};

role_view prefill_view(const planner_sample& s, const planner_config& c,
                       const planner_limits& limits, const situation& now) {
  role_view r("prefill", s.prefill.serving, c.min_prefill, c.max_prefill);
  const double ttft_ratio = s.ttft_p90_ms ? *s.ttft_p90_ms / static_cast<double>(c.ttft_ms) : 0;
  r.pressure = ttft_ratio;
  if (ttft_ratio > 1) {
    r.hot = true, r.why = "TTFT p90 over target";
  } else if (now.queue_growing && !now.decode_saturated) {
    r.hot = true, r.pressure = 1, r.why = "queue growing"; // the ratio is <= 1 here
  }
  // One instance fewer must still take the outstanding prompt tokens in one step each.
  r.spare = ttft_ratio < c.scale_down_below &&
            s.prefill_outstanding_tokens <=
                limits.prefill_token_budget * static_cast<int64_t>(r.count - 1);
  r.cold = r.spare && s.queued == 0;
  if (r.cold) r.why = "TTFT p90 under " + number("%g", c.scale_down_below) + " x target and idle";
  return r;
}

role_view decode_view(const planner_sample& s, const planner_config& c, const situation& now) {
  role_view r("decode", s.decode.serving, c.min_decode, c.max_decode);
  const double tpot_ratio = s.tpot_p90_ms ? *s.tpot_p90_ms / static_cast<double>(c.tpot_ms) : 0;
  const double kv_ratio = s.decode_kv_usage / c.kv_high;
  r.pressure = std::max(tpot_ratio, kv_ratio);
  auto hot_because = [&r](const char* why) {
    r.hot = true;
    r.why += (r.why.empty() ? "" : ", ") + std::string(why);
  };
  // TPOT over target with a lower batch cap to set: the cap answers it, within one step.
  if (tpot_ratio > 1 && !now.lowering_cap) hot_because("TPOT p90 over target");
  if (kv_ratio > 1) hot_because("KV usage over kv_high");
  if (now.decode_saturated && s.queued > 0) {
    hot_because("every batch full, requests queued");
    r.pressure = std::max(r.pressure, 1.0);
  }
  // As the remaining instances would see it after one drained: its sequences and their KV move.
  const double kv_after = r.count > 1 ? s.decode_kv_usage * r.count / (r.count - 1)
                                      : std::numeric_limits<double>::infinity();
  r.spare = tpot_ratio < c.scale_down_below && kv_after < c.kv_low &&
            s.decode_running <= now.cap * (r.count - 1);
  r.cold = r.spare && s.queued == 0;
  if (r.cold)
    r.why = "TPOT p90 under " + number("%g", c.scale_down_below) + " x target and KV usage " +
            number("%.2f", kv_after) + " after a drain";
  return r;
}

// Every number a decision may have read, for its reason.
std::string signals_text(const planner_sample& s, const planner_config& c, int64_t cap,
                         const std::optional<int64_t>& queued_before) {
  return "TTFT p90 " + latency(s.ttft_p90_ms, c.ttft_ms) + ", TPOT p90 " +
         latency(s.tpot_p90_ms, c.tpot_ms) + ", queued " + std::to_string(s.queued) +
         (queued_before ? " (was " + std::to_string(*queued_before) + ")" : std::string()) +
         ", prefill tokens " + std::to_string(s.prefill_outstanding_tokens) + ", KV usage " +
         number("%.2f", s.decode_kv_usage) + ", running " + std::to_string(s.decode_running) +
         " (batch cap " + std::to_string(cap) + ")";
}

} // namespace

const std::vector<std::string>& planner_actions() {
  static const std::vector<std::string> actions = {
      "scale_up_prefill", "scale_down_prefill", "scale_up_decode", "scale_down_decode",
      "switch_p_to_d",    "switch_d_to_p",      "set_batch_cap"};
  return actions;
}

planner::planner(planner_config config, planner_limits limits) : config_(config), limits_(limits) {
  for (const auto& action : planner_actions()) decisions_[action] = 0;
}

void planner::observe(const planner_sample& sample) {
  if (!latest_) next_evaluation_ = sample.at + config_.interval;
  latest_ = sample;
  // The cooldown runs from the end of a change: the first sample that shows none in progress.
  const bool changing = sample.prefill.changing() || sample.decode.changing();
  if (changing) cooldown_until_ = std::max(cooldown_until_, sample.at + config_.cooldown);
  // (batch, TPOT) pairs for the batch cap: the mean batch per decode instance, while the
  // instance set is stable (a starting instance has no batch yet, a draining one a shrinking
  // batch, and either skews the mean).
  if (config_.batch_cap && !changing && sample.tpot_p90_ms && sample.decode.serving > 0 &&
      sample.decode_running > 0)
    tpot_.add(static_cast<double>(sample.decode_running) / sample.decode.serving,
              *sample.tpot_p90_ms);
}

std::optional<int> planner::fitted_batch_cap() const {
  if (!config_.batch_cap) return std::nullopt;
  return tpot_.cap_for(static_cast<double>(config_.tpot_ms),
                       static_cast<int>(limits_.decode_max_batch));
}

std::optional<int> planner::batch_cap_change(const planner_sample& s) const {
  const auto fitted = fitted_batch_cap();
  if (!fitted) return std::nullopt;
  const int64_t now = s.decode_batch_cap > 0 ? s.decode_batch_cap : limits_.decode_max_batch;
  // Lowered as soon as the line predicts the current cap misses the target.
  if (*fitted < now) return fitted;
  // Raised only while the target is met, by at least an eighth (so noise in the fit does not
  // move the cap every interval), and at most doubled per step: above the current cap the line
  // is extrapolated beyond any batch it has seen.
  const bool met = s.tpot_p90_ms && *s.tpot_p90_ms <= static_cast<double>(config_.tpot_ms);
  if (met && *fitted >= now + std::max<int64_t>(1, now / 8))
    return static_cast<int>(std::min<int64_t>(*fitted, 2 * now));
  return std::nullopt;
}

std::optional<planner_decision> planner::decide(clock::time_point now) {
  if (!config_.enabled || !latest_) return std::nullopt;
  const planner_sample& s = *latest_;
  if (s.prefill.changing() || s.decode.changing()) return std::nullopt;
  if (now < cooldown_until_ || now < next_evaluation_) return std::nullopt;
  next_evaluation_ = now + config_.interval;
  auto d = evaluate(s);
  queued_at_last_evaluation_ = s.queued;
  if (!d) return std::nullopt;
  return record(std::move(*d), s, now);
}

planner_decision planner::record(planner_decision d, const planner_sample& s,
                                 clock::time_point now) {
  ++decisions_[d.action];
  if (d.target_counts.at("prefill") != s.prefill.serving ||
      d.target_counts.at("decode") != s.decode.serving)
    cooldown_until_ = std::max(cooldown_until_, now + config_.cooldown);
  return d;
}

std::optional<planner_decision> planner::evaluate(const planner_sample& s) {
  const planner_config& c = config_;
  situation now;
  now.cap = s.decode_batch_cap > 0 ? s.decode_batch_cap : limits_.decode_max_batch;
  now.new_cap = batch_cap_change(s);
  now.lowering_cap = now.new_cap && *now.new_cap < now.cap;
  now.queue_growing =
      s.queued > 0 && queued_at_last_evaluation_ && s.queued > *queued_at_last_evaluation_;
  now.decode_saturated = s.decode.serving > 0 && s.decode_running >= now.cap * s.decode.serving;
  role_view prefill = prefill_view(s, c, limits_, now);
  role_view decode = decode_view(s, c, now);
  // Cold only once idle for scale_down_after at every evaluation.
  for (role_view* r : {&prefill, &decode}) {
    if (!r->cold) {
      idle_since_.erase(r->name);
      continue;
    }
    const auto since = idle_since_.try_emplace(r->name, s.at).first->second;
    if (s.at - since < c.scale_down_after) {
      r->cold = false;
      r->why.clear();
    }
  }
  const std::string signals = signals_text(s, c, now.cap, queued_at_last_evaluation_);

  auto decision = [&](int prefill_target, int decode_target, std::string action,
                      const std::string& why) {
    planner_decision d;
    d.target_counts = {{"prefill", prefill_target}, {"decode", decode_target}};
    d.decode_batch_cap = now.new_cap;
    d.action = std::move(action);
    d.reason = why + ": prefill " + std::to_string(prefill.count) + " -> " +
               std::to_string(prefill_target) + ", decode " + std::to_string(decode.count) +
               " -> " + std::to_string(decode_target);
    if (now.new_cap)
      d.reason += ", batch cap " + std::to_string(now.cap) + " -> " + std::to_string(*now.new_cap);
    d.reason += " (" + signals + ")";
    return d;
  };
  auto step = [&](const role_view& r, int delta, const std::string& why) {
    const bool p = &r == &prefill;
    return decision(prefill.count + (p ? delta : 0), decode.count + (p ? 0 : delta),
                    (delta > 0 ? "scale_up_" : "scale_down_") + r.name, why);
  };
  auto switch_to = [&](const role_view& to, const std::string& why) {
    const bool p = &to == &prefill;
    auto d = decision(prefill.count + (p ? 1 : -1), decode.count + (p ? -1 : 1),
                      p ? "switch_d_to_p" : "switch_p_to_d", why);
    d.switches.push_back({p ? "decode" : "prefill", to.name, 1});
    return d;
  };
  auto other = [&](const role_view& r) -> role_view& { return &r == &prefill ? decode : prefill; };
  const std::array<role_view*, 2> roles = {&prefill, &decode};
  const int total = prefill.count + decode.count, total_cap = c.total_cap();

  // 1. Back inside the bounds first (an operator's change or a new config may leave a role
  // outside them): one step per interval like every other change.
  for (role_view* r : roles) {
    if (r->count >= r->min) continue;
    const std::string why = "below min_" + r->name + " (" + std::to_string(r->min) + ")";
    if (total < total_cap) return step(*r, +1, why);
    if (other(*r).count > other(*r).min) return switch_to(*r, why);
  }
  for (role_view* r : roles)
    if (r->count > r->max)
      return step(*r, -1, "above max_" + r->name + " (" + std::to_string(r->max) + ")");
  if (total > total_cap) {
    // The role that needs its instances least gives one up.
    role_view* r = prefill.pressure <= decode.pressure ? &prefill : &decode;
    if (r->count <= r->min) r = &other(*r);
    return step(*r, -1, "above max_total (" + std::to_string(total_cap) + ")");
  }

  // 2. A role over its target gets one more instance, the worse one first. At max_total it
  // takes one from the other role, if that one is well under its own target (so the switch
  // does not just move the problem).
  std::array<role_view*, 2> by_pressure = roles;
  if (decode.pressure > prefill.pressure) std::swap(by_pressure[0], by_pressure[1]);
  for (role_view* r : by_pressure) {
    if (!r->hot || r->count >= r->max) continue;
    if (total < total_cap) return step(*r, +1, r->why);
    role_view& donor = other(*r);
    if (donor.spare && !donor.hot && donor.count > donor.min)
      return switch_to(*r, r->why + " at max_total (" + std::to_string(total_cap) + ") and " +
                               donor.name + " well under target");
  }

  // 3. Nothing over target: one idle role gives one instance back, the idler first.
  if (!prefill.hot && !decode.hot) {
    for (auto it = by_pressure.rbegin(); it != by_pressure.rend(); ++it) {
      role_view* r = *it;
      if (r->cold && r->count > r->min) return step(*r, -1, r->why);
    }
  }

  // 4. The counts stay: the batch cap alone.
  if (now.new_cap)
    return decision(prefill.count, decode.count, "set_batch_cap",
                    now.lowering_cap ? "TPOT line predicts the batch cap misses the target"
                                     : "TPOT line allows a larger batch within the target");
  return std::nullopt;
}

} // namespace supernode::services::planner
