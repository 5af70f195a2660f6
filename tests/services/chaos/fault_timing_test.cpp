// When a fault was noticed and healed, from made-up event logs and liveness samples.

#include "services/chaos/fault_timing.hpp"

#include <gtest/gtest.h>

namespace chaos = supernode::services::chaos;

namespace {

chaos::fired_fault fired(chaos::fault_kind kind, double at_s) {
  chaos::fired_fault f;
  f.spec.kind = kind;
  f.spec.at_s = at_s;
  f.spec.duration_s = kind == chaos::fault_kind::stop ? 3.0 : 0.0;
  chaos::resolved_target t;
  t.process = "decode";
  t.index = 1;
  t.slot = "decode-1";
  t.instances = {"decode-1"};
  t.named = "decode-1";
  f.target = t;
  f.fired = true;
  f.fired_s = at_s + 0.01;
  return f;
}

} // namespace

TEST(chaos_fault_timing, reads_the_event_log_relative_to_the_load_start) {
  const std::string log = R"({"t": 1000.5, "event": "spawned", "process": "decode-1", "pid": 7}
not json
{"t": 1004.25, "event": "exited", "process": "decode-1", "signal": 9}
{"event": "ready", "process": "decode-1"}
{"t": 1002.0, "event": "ready", "process": "decode-0", "pid": 8}
)";
  const auto events = chaos::parse_process_events(log, 1000.0);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].t_s, 0.5);
  EXPECT_EQ(events[1].event, "ready"); // sorted by time
  EXPECT_EQ(events[1].process, "decode-0");
  EXPECT_EQ(events[2].t_s, 4.25);
  EXPECT_EQ(events[2].event, "exited");
}

TEST(chaos_fault_timing, a_kill_is_detected_by_its_exit_and_recovered_when_ready) {
  const std::vector<chaos::process_event> events{
      {0.1, "ready", "decode-1"},  // the first start: before the fault, not a recovery
      {4.2, "exited", "decode-0"}, // another slot
      {4.3, "exited", "decode-1"}, {4.4, "restarting", "decode-1"}, {6.5, "ready", "decode-1"},
  };
  const auto r = chaos::time_fault(fired(chaos::fault_kind::kill, 4.0), events, {});
  EXPECT_EQ(r.kind, "kill");
  EXPECT_EQ(r.target, "decode-1");
  EXPECT_EQ(*r.detected_s, 4.3);
  EXPECT_EQ(*r.recovered_s, 6.5);
}

TEST(chaos_fault_timing, without_an_event_log_the_gateways_view_decides) {
  const std::vector<chaos::liveness_sample> samples{
      {0.0, "decode-1", true},  {0.0, "decode-0", true}, {3.0, "decode-0", false},
      {4.6, "decode-1", false}, {8.0, "decode-1", true},
  };
  const auto r = chaos::time_fault(fired(chaos::fault_kind::kill, 4.0), {}, samples);
  EXPECT_EQ(*r.detected_s, 4.6);
  EXPECT_EQ(*r.recovered_s, 8.0);
  // A stop never exits: the gateway declaring it down is the detection.
  const auto s = chaos::time_fault(fired(chaos::fault_kind::stop, 4.0), {}, samples);
  EXPECT_EQ(*s.detected_s, 4.6);
  EXPECT_EQ(*s.recovered_s, 8.0);
}

TEST(chaos_fault_timing, unknown_stays_unknown) {
  // Never seen down: neither detected nor recovered.
  const auto quiet =
      chaos::time_fault(fired(chaos::fault_kind::stop, 4.0), {}, {{0.0, "decode-1", true}});
  EXPECT_FALSE(quiet.detected_s);
  EXPECT_FALSE(quiet.recovered_s);
  // Down and never back.
  const auto gone =
      chaos::time_fault(fired(chaos::fault_kind::kill, 4.0), {{4.5, "exited", "decode-1"}}, {});
  EXPECT_EQ(*gone.detected_s, 4.5);
  EXPECT_FALSE(gone.recovered_s);
  // A fault that did not fire keeps its note and no times.
  auto missed = fired(chaos::fault_kind::kill, 4.0);
  missed.fired = false;
  missed.note = "not fired: the run ended first";
  const auto m = chaos::time_fault(missed, {{4.5, "exited", "decode-1"}}, {});
  EXPECT_EQ(m.note, "not fired: the run ended first");
  EXPECT_FALSE(m.detected_s);
  // A plane fault has no process to watch.
  chaos::fired_fault drop;
  drop.spec.kind = chaos::fault_kind::drop;
  drop.spec.at_s = 2.0;
  drop.spec.duration_s = 2.0;
  drop.fired = true;
  const auto d = chaos::time_fault(drop, {{4.5, "exited", "decode-1"}}, {});
  EXPECT_EQ(d.target, "*");
  EXPECT_EQ(d.end_s(), 4.0);
  EXPECT_FALSE(d.detected_s);
}
