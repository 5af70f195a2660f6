// plan_scale: which slots a scale request starts and drains (the lowest-numbered slots stay),
// and what it refuses; scale_operations: repeats of an operation id get its answer, the id with
// other counts or a second operation while one runs are conflicts.

#include "services/cluster/scale_plan.hpp"

#include <gtest/gtest.h>

using namespace supernode::services::cluster;

namespace {
std::vector<slot_view> three_decode_two_prefill() {
  return {{"gateway-0", true, ""}, {"decode-0", true, ""},  {"decode-1", true, ""},
          {"decode-2", false, ""}, {"prefill-0", true, ""}, {"prefill-1", true, ""}};
}
using names = std::vector<std::string>;
} // namespace

TEST(scale_plan, the_kind_of_a_slot_is_its_name_without_the_index) {
  EXPECT_EQ(process_kind_of("decode-1"), "decode");
  EXPECT_EQ(process_kind_of("ems_controller-0"), "ems_controller");
  EXPECT_EQ(process_kind_of("my-role-12"), "my-role");
  EXPECT_EQ(process_kind_of("all"), "all");
  EXPECT_EQ(process_kind_of("odd-x"), "odd-x");
}

TEST(scale_plan, counts_keep_the_lowest_slots_and_change_only_what_differs) {
  const auto slots = three_decode_two_prefill();
  auto plan = plan_scale(slots, {{{"decode", 1}}, ""});
  EXPECT_TRUE(plan.error.empty()) << plan.error;
  EXPECT_EQ(plan.stop, names{"decode-1"});
  EXPECT_TRUE(plan.start.empty());
  plan = plan_scale(slots, {{{"decode", 3}, {"prefill", 1}}, ""});
  EXPECT_EQ(plan.start, names{"decode-2"});
  EXPECT_EQ(plan.stop, names{"prefill-1"});
  plan = plan_scale(slots, {{{"decode", 2}}, ""}); // already so
  EXPECT_TRUE(plan.start.empty() && plan.stop.empty() && plan.error.empty());
  plan = plan_scale(slots, {{{"prefill", 0}}, ""});
  EXPECT_EQ(plan.stop, (names{"prefill-0", "prefill-1"}));
}

TEST(scale_plan, an_unknown_kind_or_more_than_the_slots_is_refused_naming_it) {
  const auto slots = three_decode_two_prefill();
  auto plan = plan_scale(slots, {{{"decoder", 1}}, ""});
  EXPECT_NE(plan.error.find("no process kind 'decoder'"), std::string::npos) << plan.error;
  plan = plan_scale(slots, {{{"decode", 4}}, ""});
  EXPECT_NE(plan.error.find("'decode' has 3 slot(s)"), std::string::npos) << plan.error;
  plan = plan_scale(slots, {{{"decode", 4}}, ""}, {{"decode", "its instances form groups"}});
  EXPECT_NE(plan.error.find("its instances form groups"), std::string::npos) << plan.error;
  EXPECT_TRUE(plan.start.empty() && plan.stop.empty());
  plan = plan_scale(slots, {{{"decode", 1}, {"prefill", -1}}, ""});
  EXPECT_FALSE(plan.error.empty());
  EXPECT_TRUE(plan.stop.empty()) << "a refused request changes nothing";
  EXPECT_FALSE(plan_scale(slots, {}).error.empty());
}

TEST(scale_plan, an_operation_id_answers_its_repeats_and_refuses_other_counts) {
  scale_operations ops;
  const scale_request a{{{"decode", 1}}, "op-1"}, other_counts{{{"decode", 2}}, "op-1"},
      b{{{"prefill", 1}}, "op-2"}, anonymous{{{"decode", 1}}, ""};
  std::string answer;
  EXPECT_EQ(ops.classify(a, &answer), scale_operations::verdict::fresh);
  ops.begin(a);
  EXPECT_TRUE(ops.running());
  // While it runs: the same operation is a repeat (no answer yet), anything else a conflict.
  answer.clear();
  EXPECT_EQ(ops.classify(a, &answer), scale_operations::verdict::repeat);
  EXPECT_TRUE(answer.empty());
  EXPECT_EQ(ops.classify(other_counts, nullptr), scale_operations::verdict::conflict);
  EXPECT_EQ(ops.classify(b, nullptr), scale_operations::verdict::conflict);
  EXPECT_EQ(ops.classify(anonymous, nullptr), scale_operations::verdict::conflict);
  ops.finish("{\"ok\":true}");
  EXPECT_FALSE(ops.running());
  // Done: a repeat gets the first answer, the id with other counts stays a conflict.
  EXPECT_EQ(ops.classify(a, &answer), scale_operations::verdict::repeat);
  EXPECT_EQ(answer, "{\"ok\":true}");
  EXPECT_EQ(ops.classify(other_counts, nullptr), scale_operations::verdict::conflict);
  EXPECT_EQ(ops.classify(b, nullptr), scale_operations::verdict::fresh);
  EXPECT_EQ(ops.classify(anonymous, nullptr), scale_operations::verdict::fresh);
}

TEST(scale_plan, a_kind_that_can_join_gets_new_slots_past_its_own) {
  const auto slots = three_decode_two_prefill();
  const join_refusals joins{{"decode", ""}};
  auto plan = plan_scale(slots, {{{"decode", 5}}, ""}, joins);
  EXPECT_TRUE(plan.error.empty()) << plan.error;
  EXPECT_EQ(plan.add, (names{"decode-3", "decode-4"}));
  EXPECT_EQ(plan.start, (names{"decode-2", "decode-3", "decode-4"}));
  // prefill was not said to join: its slots are the limit.
  EXPECT_FALSE(plan_scale(slots, {{{"prefill", 3}}, ""}, joins).error.empty());
  EXPECT_FALSE(
      plan_scale(slots, {{{"decode", max_processes_per_kind + 1}}, ""}, joins).error.empty());
}

TEST(scale_plan, a_grouped_kind_joins_whole_groups_past_its_slots) {
  // decode-0..1 are one expert-parallel group of 2 ranks; past them decode joins 2 at a time.
  const std::vector<slot_view> slots{{"decode-0", true, ""}, {"decode-1", true, ""}};
  const join_refusals joins{{"decode", ""}};
  const join_group_sizes groups{{"decode", 2}};
  auto plan = plan_scale(slots, {{{"decode", 4}}, ""}, joins, {}, groups);
  ASSERT_TRUE(plan.error.empty()) << plan.error;
  EXPECT_EQ(plan.add, (names{"decode-2", "decode-3"}));
  plan = plan_scale(slots, {{{"decode", 3}}, ""}, joins, {}, groups);
  EXPECT_NE(plan.error.find("whole expert-parallel groups of 2 ranks"), std::string::npos)
      << plan.error;
  EXPECT_TRUE(plan.start.empty() && plan.add.empty()) << "a refused request changes nothing";
  // Within the slots a group resizes rank by rank (it re-forms over the ranks that stay).
  const std::vector<slot_view> grown{{"decode-0", true, ""},
                                     {"decode-1", true, ""},
                                     {"decode-2", true, ""},
                                     {"decode-3", true, ""}};
  plan = plan_scale(grown, {{{"decode", 3}}, ""}, joins, {}, groups);
  ASSERT_TRUE(plan.error.empty()) << plan.error;
  EXPECT_EQ(plan.stop, (names{"decode-3"}));
  EXPECT_TRUE(plan_scale(grown, {{{"decode", 6}}, ""}, joins, {}, groups).error.empty());
  EXPECT_FALSE(plan_scale(grown, {{{"decode", 5}}, ""}, joins, {}, groups).error.empty());
}

TEST(scale_plan, switching_roles_turns_running_processes_of_one_kind_into_the_other) {
  const auto slots = three_decode_two_prefill(); // decode-0, decode-1 and prefill-0, prefill-1 run
  const join_refusals joins{{"decode", ""}, {"prefill", ""}};
  const switchable_kinds switchable{{"decode", "decode"}, {"prefill", "prefill"}};
  scale_request to_decode{{{"decode", 3}, {"prefill", 1}}, "", true};
  auto plan = plan_scale(slots, to_decode, joins, switchable);
  ASSERT_TRUE(plan.error.empty()) << plan.error;
  EXPECT_EQ(plan.switches, (std::vector<role_switch>{{"prefill-1", "decode"}}));
  EXPECT_TRUE(plan.start.empty()) << "the switch covers the new decode process";
  EXPECT_TRUE(plan.stop.empty());

  // With prefill-1 serving decode: switching back picks it, not one of decode's own.
  auto switched = slots;
  switched[5].serves = "decode";
  plan = plan_scale(switched, {{{"decode", 2}, {"prefill", 2}}, "", true}, joins, switchable);
  EXPECT_EQ(plan.switches, (std::vector<role_switch>{{"prefill-1", "prefill"}}));
  // Without switching it counts for decode, and a scale-down stops it before decode's own.
  plan = plan_scale(switched, {{{"decode", 2}}, ""}, joins, switchable);
  EXPECT_TRUE(plan.switches.empty());
  EXPECT_EQ(plan.stop, (names{"prefill-1"}));
  // More than a switch covers: the rest start as usual, numbered past every slot of the kind.
  plan = plan_scale(slots, {{{"decode", 5}, {"prefill", 1}}, "", true}, joins, switchable);
  EXPECT_EQ(plan.switches.size(), 1u);
  EXPECT_EQ(plan.start, (names{"decode-2", "decode-3"}));
  EXPECT_EQ(plan.add, (names{"decode-3"}));

  // A kind that does not switch is refused, naming it.
  plan = plan_scale(slots, {{{"decode", 3}, {"gateway", 0}}, "", true}, joins, switchable);
  EXPECT_NE(plan.error.find("'gateway'"), std::string::npos) << plan.error;
  EXPECT_TRUE(plan.switches.empty());
}
