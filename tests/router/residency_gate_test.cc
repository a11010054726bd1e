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

}  // namespace

TEST(ResidencyGateTest, WaitersGoInTheOrderTheirWaitsRunOut) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10, /*max_wait_s=*/100));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 90, kCap, At(0), &woken);
  ResidencyGate::Turn patient{50, kCap};                           // max_wait: 100 s
  ResidencyGate::Turn urgent{50, kCap, absl::Seconds(20)};         // its deadline leaves 20 s
  ResidencyGate::Turn capped{50, kCap, absl::Seconds(1000)};       // capped at max_wait
  const uint64_t p = g.Enter(0, "p", patient, At(1), &woken);
  const uint64_t u = g.Enter(0, "u", urgent, At(2), &woken);
  const uint64_t c = g.Enter(0, "c", capped, At(3), &woken);
  ASSERT_NE(p, 0u);
  ASSERT_NE(u, 0u);
  ASSERT_NE(c, 0u);
  EXPECT_EQ(g.NextEvent(), At(22));
  // Room for one: the most urgent goes first though it came later.
  g.Leave(0, "a", 40, At(5), &woken);
  g.Tick(At(15), &woken);  // a idle past its grace: it leaves
  EXPECT_THAT(woken, ElementsAre(u));
  woken.clear();
  // u's own bound ran out first; now p (due 101) before c (due 103).
  g.Leave(0, "u", 50, At(20), &woken);
  g.Tick(At(101), &woken);
  EXPECT_THAT(woken, ElementsAre(p));
  EXPECT_EQ(g.counters().admitted_by_timeout, 1u);
}

TEST(ResidencyGateTest, AColdWaiterTakesTheFirstRoomAnyInstanceHas) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10, /*max_wait_s=*/100));
  std::vector<uint64_t> woken;
  // Instance 0 is full; instance 1 is known to the gate and full too.
  g.Enter(0, "a", 80, kCap, At(0), &woken);
  g.Enter(1, "b", 80, kCap, At(0), &woken);
  ResidencyGate::Turn warm{50, kCap};
  ResidencyGate::Turn cold{50, kCap, absl::ZeroDuration(), /*movable=*/true};
  const uint64_t w = g.Enter(0, "w", warm, At(1), &woken);  // its prefix is on 0: waits there
  const uint64_t c = g.Enter(0, "c", cold, At(2), &woken);
  ASSERT_NE(w, 0u);
  ASSERT_NE(c, 0u);
  EXPECT_TRUE(woken.empty());
  // Instance 1 frees room first: the cold waiter goes there, not the warm one.
  g.Leave(1, "b", 80, At(3), &woken);
  g.Tick(At(13), &woken);
  EXPECT_THAT(woken, ElementsAre(c));
  EXPECT_EQ(g.TakeMove(c), 1);
  EXPECT_EQ(g.TakeMove(c), std::nullopt);  // told once
  EXPECT_EQ(g.TakeMove(w), std::nullopt);
  EXPECT_EQ(g.resident_sessions(1), 1u);
  EXPECT_EQ(g.resident_tokens(1), 50);
  EXPECT_EQ(g.counters().moved, 1u);
  EXPECT_EQ(g.waiting(), 1u);
}

TEST(ResidencyGateTest, AColdWaiterGoesAtOnceWhereRoomIsFree) {
  ResidencyGate g(Opts());
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 80, kCap, At(0), &woken);
  g.Enter(1, "b", 10, kCap, At(0), &woken);
  const uint64_t c =
      g.Enter(0, "c", {50, kCap, absl::ZeroDuration(), /*movable=*/true}, At(1), &woken);
  ASSERT_NE(c, 0u);
  EXPECT_THAT(woken, ElementsAre(c));
  EXPECT_EQ(g.TakeMove(c), 1);
  EXPECT_EQ(g.waiting(), 0u);
}

TEST(ResidencyGateTest, EveryTurnMakesItsSessionResidentUntilIdleForTheWindow) {
  ResidencyGate::Options o = Opts();
  o.window = absl::Seconds(60);
  ResidencyGate g(o);
  std::vector<uint64_t> woken;
  auto pass = [](int64_t footprint) {
    ResidencyGate::Turn t{footprint, 100000};
    t.hold = false;  // an offload, or a turn routed without holding
    return t;
  };
  EXPECT_EQ(g.Enter(0, "a", pass(1000), At(0), &woken), 0u);
  EXPECT_EQ(g.Enter(0, "b", pass(2000), At(10), &woken), 0u);
  EXPECT_EQ(g.Enter(1, "c", pass(500), At(20), &woken), 0u);
  EXPECT_EQ(g.demand_tokens(0), 3000);
  EXPECT_EQ(g.demand_tokens(1), 500);
  EXPECT_EQ(g.demand_tokens(7), 0);  // no session there yet
  EXPECT_EQ(g.counters().admitted_at_once, 0u) << "turns not held are no turns through the gate";

  // A move takes the session along; what the engine held after a turn becomes its footprint.
  EXPECT_EQ(g.Enter(1, "b", pass(2500), At(40), &woken), 0u);
  EXPECT_EQ(g.demand_tokens(0), 1000);
  EXPECT_EQ(g.demand_tokens(1), 3000);
  g.Leave(0, "a", 1700, At(45), &woken);
  EXPECT_EQ(g.demand_tokens(0), 1700);
  ASSERT_TRUE(g.Find("a").has_value());
  EXPECT_EQ(g.Find("a")->backend, 0);
  EXPECT_EQ(g.Find("a")->footprint_tokens, 1700);

  // A session counts while its turn is in flight, and for the window after the last one ends.
  g.Leave(1, "c", 0, At(41), &woken);
  g.Leave(1, "b", 0, At(45), &woken);
  EXPECT_EQ(g.Enter(2, "d", pass(700), At(50), &woken), 0u);  // in flight from here on
  g.Age(At(100));
  EXPECT_EQ(g.demand_tokens(1), 3000);
  g.Age(At(101));  // c has been idle 60 s
  EXPECT_EQ(g.demand_tokens(1), 2500);
  EXPECT_FALSE(g.Find("c").has_value());
  g.Age(At(200));
  EXPECT_EQ(g.demand_tokens(0), 0);
  EXPECT_EQ(g.demand_tokens(1), 0);
  EXPECT_EQ(g.demand_tokens(2), 700);  // its turn is still running
  g.Leave(2, "d", 0, At(210), &woken);
  g.Age(At(269));
  EXPECT_EQ(g.demand_tokens(2), 700);
  g.Age(At(270));
  EXPECT_EQ(g.demand_tokens(2), 0);
  EXPECT_EQ(g.counters().expired, 4u);
  EXPECT_TRUE(woken.empty());

  // Back again: counted again.
  EXPECT_EQ(g.Enter(1, "c", pass(800), At(280), &woken), 0u);
  EXPECT_EQ(g.demand_tokens(1), 800);
}

TEST(ResidencyGateTest, AZeroWindowKeepsResidentsButCountsNoDemand) {
  ResidencyGate::Options o = Opts(/*quantum=*/100, /*grace_s=*/10);
  o.window = absl::ZeroDuration();
  ResidencyGate g(o);
  std::vector<uint64_t> woken;
  EXPECT_EQ(g.Enter(0, "a", 40, kCap, At(0), &woken), 0u);
  EXPECT_EQ(g.resident_tokens(0), 40);
  EXPECT_EQ(g.demand_tokens(0), 0);
  g.Leave(0, "a", 0, At(1), &woken);
  g.Age(At(10.5));  // idle residents leave after the grace time
  EXPECT_EQ(g.resident_sessions(0), 1u);
  g.Age(At(11));
  EXPECT_EQ(g.resident_sessions(0), 0u);
}

}  // namespace kvroute::router
