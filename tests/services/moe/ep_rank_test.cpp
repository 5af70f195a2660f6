// ep_rank::form: a rank forms its group over the members its membership view says are alive,
// and a membership change that arrives while it forms makes it look again. The change may land
// at any moment of the attempt, even between reading the view and connecting (the actor thread
// delivers it while the compute thread forms), and must never be lost: a lost "member down"
// leaves the rank waiting for a dead peer's region until its patience runs out, the group
// stopped all that while; a lost "member back" leaves the group smaller than it could be.
// The scripted view delivers each change right after the rank has read the member concerned.

#include "../../model/tiny_model.hpp"
#include "services/moe/ep_rank.hpp"

#include <gtest/gtest.h>
#include <map>
#include <unistd.h>

using namespace supernode;
using services::ep_member_view;
using services::ep_membership;
using services::ep_rank;

namespace {

// A view the test drives: each member alive (with its incarnation) or not, and a hook that
// runs when the rank reads a member's incarnation (a change arriving right after the read).
class scripted_view final : public ep_member_view {
public:
  std::string me;
  std::map<std::string, std::optional<uint64_t>> alive;
  std::function<void(const std::string&)> after_read;

  const std::string& self() const override { return me; }
  uint64_t incarnation() const override { return 1; }
  std::vector<std::string> names() const override {
    std::vector<std::string> names{me};
    for (auto& [name, _] : alive) names.push_back(name);
    return names;
  }
  std::optional<uint64_t> live_incarnation(const std::string& name) const override {
    const auto it = alive.find(name);
    const auto incarnation = it == alive.end() ? std::nullopt : it->second;
    if (after_read) after_read(name);
    return incarnation;
  }
};

// decode-0 of a group of decode-0 and decode-1 over shared memory, in a cluster of its own.
ep_membership two_ranks() {
  ep_membership m;
  m.members = {"decode-0", "decode-1"};
  m.fabric_kind = "shm";
  m.fabric.cluster = "eprank" + std::to_string(::getpid());
  m.fabric.group = "decode-ep0";
  m.fabric.flags = services::ep_flag_count;
  m.options.rank = 0;
  m.options.ranks = 2;
  m.options.local_batch = 8;
  return m;
}

// decode-0's seat, watching a scripted view.
class ep_rank_test : public ::testing::Test {
protected:
  void SetUp() override {
    auto view = std::make_unique<scripted_view>();
    script = view.get();
    script->me = "decode-0";
    rank.watch(std::move(view));
  }
  // decode-1 turns `next` (alive in that incarnation, or gone) and the rank hears of it
  // (`what`), the first time the rank reads it as anything else.
  void after_a_read_decode_1_turns(std::optional<uint64_t> next,
                                   transport::membership_event::kind what) {
    script->after_read = [this, next, what](const std::string& name) {
      if (name != "decode-1" || script->alive["decode-1"] == next) return;
      script->alive["decode-1"] = next;
      rank.on_member_event({what, "decode-1", "scripted"});
    };
  }
  // Patience far past what forming takes: a lost "down" means waiting all of it for decode-1's
  // region, and failing.
  bool form(std::chrono::milliseconds patience = std::chrono::seconds(20)) {
    return rank.form([] { return false; }, patience);
  }

  ep_rank rank{supernode::testing::tiny_weights(model::precision::int8), two_ranks()};
  scripted_view* script = nullptr;
  const std::vector<std::string> alone{"decode-0"};
};

} // namespace

TEST_F(ep_rank_test, a_member_going_down_just_after_the_rank_read_it_alive_is_not_lost) {
  // decode-1 dies the moment the rank has read it alive: its down event arrives before the
  // rank has even begun to connect the formation that counts it.
  script->alive["decode-1"] = 22;
  after_a_read_decode_1_turns(std::nullopt, transport::membership_event::kind::down);
  EXPECT_TRUE(form());
  EXPECT_EQ(rank.formation_members(), alone);
  EXPECT_FALSE(rank.broken());
}

TEST_F(ep_rank_test, a_member_coming_back_while_the_rank_forms_is_taken_in) {
  script->alive["decode-1"] = std::nullopt;
  ASSERT_TRUE(form());
  ASSERT_EQ(rank.formation_members(), alone);
  EXPECT_FALSE(rank.wants_reform());
  // decode-1 comes back just after a look that found it absent: the rank wants to re-form.
  after_a_read_decode_1_turns(23, transport::membership_event::kind::joined);
  form(std::chrono::milliseconds(200));
  EXPECT_TRUE(rank.wants_reform()) << "decode-1's return was lost";
}

TEST_F(ep_rank_test,
       a_member_outside_the_formation_going_down_as_an_attempt_counts_it_is_not_lost) {
  script->alive["decode-1"] = std::nullopt;
  ASSERT_TRUE(form());
  // The formation of one breaks; decode-1 is back, and dies again just after the next attempt
  // read it alive, before that attempt recorded it among its members.
  rank.fail("the fabric broke");
  script->alive["decode-1"] = 24;
  after_a_read_decode_1_turns(std::nullopt, transport::membership_event::kind::down);
  EXPECT_TRUE(form());
  EXPECT_EQ(rank.formation_members(), alone);
  EXPECT_FALSE(rank.broken());
}
