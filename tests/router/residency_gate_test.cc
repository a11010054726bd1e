// The residency gate on a scripted timeline: who goes at once, who waits,
// and what wakes each waiter.
#include "router/residency_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace kvroute::router {
namespace {

using ::testing::ElementsAre;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
absl::Time At(double s) { return kT0 + absl::Seconds(s); }

ResidencyGate::Options Opts(int quantum = 100, double grace_s = 10, double max_wait_s = 100) {
  ResidencyGate::Options o;
  o.fill = 0.9;
  o.quantum_turns = quantum;
  o.grace = absl::Seconds(grace_s);
  o.max_wait = absl::Seconds(max_wait_s);
  return o;
}

constexpr int64_t kCap = 100;  // 90 tokens may be resident

TEST(ResidencyGateTest, SessionsGoWhileTheirKvFitsThenWait) {
  ResidencyGate g(Opts());
  std::vector<uint64_t> woken;
  EXPECT_EQ(g.Enter(0, "a", 40, kCap, At(0), &woken), 0u);
  EXPECT_EQ(g.Enter(0, "b", 40, kCap, At(0), &woken), 0u);
  const uint64_t c = g.Enter(0, "c", 40, kCap, At(0), &woken);
  EXPECT_NE(c, 0u);
  EXPECT_EQ(g.waiting(), 1u);
  EXPECT_EQ(g.resident_sessions(0), 2u);
  EXPECT_EQ(g.resident_tokens(0), 80);
  // Another instance is unaffected.
  EXPECT_EQ(g.Enter(1, "c2", 40, kCap, At(0), &woken), 0u);
  // A resident session's next turn goes at once though c waits.
  g.Leave(0, "a", 42, At(1), &woken);
  EXPECT_TRUE(woken.empty());
  EXPECT_EQ(g.Enter(0, "a", 45, kCap, At(2), &woken), 0u);
  EXPECT_EQ(g.resident_tokens(0), 85);
  EXPECT_TRUE(woken.empty());
}

TEST(ResidencyGateTest, AnIdleResidentMakesRoomAfterTheGraceTime) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 50, kCap, At(0), &woken);
  const uint64_t b = g.Enter(0, "b", 50, kCap, At(0), &woken);
  ASSERT_NE(b, 0u);
  g.Leave(0, "a", 50, At(5), &woken);  // a thinks: still resident
  EXPECT_TRUE(woken.empty());
  EXPECT_EQ(g.NextEvent(), At(15));
  g.Tick(At(14.9), &woken);
  EXPECT_TRUE(woken.empty());
  g.Tick(At(15), &woken);
  EXPECT_THAT(woken, ElementsAre(b));
  EXPECT_EQ(g.counters().expired, 1u);
  EXPECT_EQ(g.resident_sessions(0), 1u);
  EXPECT_FALSE(g.NextEvent().has_value()) << "nobody waits";
}

TEST(ResidencyGateTest, AResidentYieldsAfterItsQuantumWhileOthersWait) {
  ResidencyGate g(Opts(/*quantum=*/2));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 60, kCap, At(0), &woken);
  const uint64_t b = g.Enter(0, "b", 60, kCap, At(0), &woken);
  g.Leave(0, "a", 60, At(1), &woken);  // turn 1
  EXPECT_TRUE(woken.empty());
  EXPECT_EQ(g.Enter(0, "a", 60, kCap, At(2), &woken), 0u);
  g.Leave(0, "a", 60, At(3), &woken);  // turn 2: yields to b
  EXPECT_THAT(woken, ElementsAre(b));
  EXPECT_EQ(g.counters().yielded, 1u);
  // a's next turn now queues behind b's residency.
  woken.clear();
  const uint64_t a = g.Enter(0, "a", 60, kCap, At(4), &woken);
  EXPECT_NE(a, 0u);
  g.Leave(0, "b", 60, At(5), &woken);
  g.Enter(0, "b", 60, kCap, At(6), &woken);
  g.Leave(0, "b", 60, At(7), &woken);
  EXPECT_THAT(woken, ElementsAre(a));
}

TEST(ResidencyGateTest, NoWaitOutlastsMaxWait) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/1000, /*max_wait_s=*/30));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 80, kCap, At(0), &woken);
  const uint64_t b = g.Enter(0, "b", 80, kCap, At(10), &woken);
  EXPECT_EQ(g.NextEvent(), At(40));
  g.Tick(At(39), &woken);
  EXPECT_TRUE(woken.empty());
  g.Tick(At(40), &woken);
  EXPECT_THAT(woken, ElementsAre(b));
  EXPECT_EQ(g.counters().admitted_by_timeout, 1u);
  EXPECT_EQ(g.resident_tokens(0), 80) << "a yielded to b";
  EXPECT_EQ(g.counters().yielded_forced, 1u);
  // a's next turn waits in turn.
  EXPECT_NE(g.Enter(0, "a", 80, kCap, At(41), &woken), 0u);
}

TEST(ResidencyGateTest, WaitersGoFirstComeFirstServed) {
  ResidencyGate g(Opts(/*quantum=*/1));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 60, kCap, At(0), &woken);
  const uint64_t big = g.Enter(0, "big", 80, kCap, At(1), &woken);
  const uint64_t small = g.Enter(0, "small", 10, kCap, At(2), &woken);
  EXPECT_NE(small, 0u) << "a newcomer that fits does not overtake the queue";
  g.Leave(0, "a", 60, At(3), &woken);  // a yields (quantum 1): big, then small fit
  EXPECT_THAT(woken, ElementsAre(big, small));
}

TEST(ResidencyGateTest, ASmallWaiterBackfillsBehindOneThatDoesNotFit) {
  ResidencyGate g(Opts(/*quantum=*/1));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 40, kCap, At(0), &woken);
  g.Enter(0, "b", 40, kCap, At(0), &woken);
  const uint64_t big = g.Enter(0, "big", 60, kCap, At(1), &woken);
  const uint64_t small = g.Enter(0, "small", 30, kCap, At(2), &woken);
  g.Leave(0, "a", 40, At(3), &woken);  // a yields 40: big (60) does not fit beside b, small does
  EXPECT_THAT(woken, ElementsAre(small));
  woken.clear();
  g.Leave(0, "b", 40, At(4), &woken);  // b yields too: now big fits
  EXPECT_THAT(woken, ElementsAre(big));
  EXPECT_EQ(g.resident_tokens(0), 90);
}

TEST(ResidencyGateTest, AMovedSessionFreesItsOldInstance) {
  ResidencyGate g(Opts());
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 80, kCap, At(0), &woken);
  const uint64_t b = g.Enter(0, "b", 80, kCap, At(0), &woken);
  g.Leave(0, "a", 80, At(1), &woken);
  EXPECT_EQ(g.Enter(1, "a", 80, kCap, At(2), &woken), 0u);
  EXPECT_THAT(woken, ElementsAre(b));
  EXPECT_EQ(g.resident_sessions(0), 1u);
  EXPECT_EQ(g.resident_sessions(1), 1u);
}

TEST(ResidencyGateTest, AnEmptyInstanceTakesAnySession) {
  ResidencyGate g(Opts());
  std::vector<uint64_t> woken;
  EXPECT_EQ(g.Enter(0, "huge", 500, kCap, At(0), &woken), 0u);
}

TEST(ResidencyGateTest, AnAbandonedHeadLetsTheNextGo) {
  ResidencyGate g(Opts());
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 50, kCap, At(0), &woken);
  const uint64_t big = g.Enter(0, "big", 80, kCap, At(0), &woken);
  const uint64_t small = g.Enter(0, "small", 30, kCap, At(0), &woken);
  g.Abandon(big, At(1), &woken);
  EXPECT_THAT(woken, ElementsAre(small));
  EXPECT_EQ(g.waiting(), 0u);
}

ResidencyGate::Turn Reloadable(int64_t footprint, double reload_s) {
  ResidencyGate::Turn t{footprint, kCap};
  t.reload_s = reload_s;
  return t;
}

// On an instance with a host tier, a turn whose prefix it holds goes at once
// if its reload beats the wait: the idle residents, the longest idle first,
// are swapped out until it fits; an active resident stays.
TEST(ResidencyGateTest, AReloadableTurnSwapsIdleResidentsOut) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 30, kCap, At(0), &woken);
  g.Enter(0, "b", 30, kCap, At(0), &woken);
  g.Enter(0, "c", 30, kCap, At(0), &woken);
  g.Leave(0, "b", 30, At(1), &woken);  // idle longest
  g.Leave(0, "a", 30, At(2), &woken);  // idle since 2; c still runs
  EXPECT_EQ(g.expected_wait(), absl::Seconds(10)) << "grace before any wait";
  EXPECT_EQ(g.Enter(0, "d", Reloadable(30, 0.5), At(3), &woken), 0u);
  EXPECT_EQ(g.counters().swapped_in, 1u);
  EXPECT_EQ(g.counters().swapped_out, 1u);
  EXPECT_FALSE(g.Find("b").has_value()) << "the longest idle went";
  EXPECT_TRUE(g.Find("a").has_value());
  EXPECT_EQ(g.resident_tokens(0), 90);
  // b's next turn comes back the same way, swapping a out.
  EXPECT_EQ(g.Enter(0, "b", Reloadable(30, 0.5), At(4), &woken), 0u);
  EXPECT_FALSE(g.Find("a").has_value());
  EXPECT_EQ(g.counters().swapped_out, 2u);
  EXPECT_TRUE(woken.empty());
}

// A reload longer than the expected wait, a turn with no host copy, or no
// room beside the active residents: the turn waits and nobody is swapped.
TEST(ResidencyGateTest, ASlowOrRoomlessReloadWaitsAsAnyOther) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 40, kCap, At(0), &woken);
  g.Enter(0, "b", 40, kCap, At(0), &woken);
  g.Leave(0, "a", 40, At(1), &woken);
  EXPECT_NE(g.Enter(0, "slow", Reloadable(40, 12), At(2), &woken), 0u);
  EXPECT_NE(g.Enter(0, "cold", Reloadable(40, -1), At(2), &woken), 0u);
  EXPECT_NE(g.Enter(0, "big", Reloadable(60, 0.1), At(2), &woken), 0u)
      << "b's 40 active tokens and 60 exceed 90";
  EXPECT_EQ(g.counters().swapped_in, 0u);
  EXPECT_EQ(g.counters().swapped_out, 0u);
  EXPECT_TRUE(g.Find("a").has_value());
}

// The expected wait is the weighted mean of the waits seen: one 20 s wait
// moves it from the 10 s grace a tenth of the way.
TEST(ResidencyGateTest, TheExpectedWaitLearnsFromWaits) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 60, kCap, At(0), &woken);
  const uint64_t b = g.Enter(0, "b", 60, kCap, At(0), &woken);
  g.Leave(0, "a", 60, At(10), &woken);  // idle from 10: room at 20
  g.Tick(At(20), &woken);
  ASSERT_THAT(woken, ElementsAre(b));
  EXPECT_EQ(g.expected_wait(), absl::Seconds(11));
}

// A reloadable turn the active residents leave no room goes the moment one
// of them goes idle, swapping it out, not a grace time later.
TEST(ResidencyGateTest, AWaitingReloadableTurnSwapsInWhenAResidentGoesIdle) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 45, kCap, At(0), &woken);
  g.Enter(0, "b", 45, kCap, At(0), &woken);
  const uint64_t c = g.Enter(0, "c", Reloadable(45, 0.5), At(1), &woken);
  ASSERT_NE(c, 0u);
  const uint64_t cold = g.Enter(0, "cold", 45, kCap, At(1), &woken);
  ASSERT_NE(cold, 0u);
  g.Leave(0, "a", 45, At(3), &woken);
  EXPECT_THAT(woken, ElementsAre(c));
  EXPECT_FALSE(g.Find("a").has_value());
  EXPECT_EQ(g.counters().swapped_out, 1u);
  EXPECT_EQ(g.counters().admitted_after_wait, 1u);
  EXPECT_EQ(g.expected_wait(), absl::Seconds(9.2)) << "a 2 s wait: 10 + 0.1 x (2 - 10)";
  EXPECT_EQ(g.waiting(), 1u) << "the turn that cannot swap waits on";
}

}  // namespace
}  // namespace kvroute::router
