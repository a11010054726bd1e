// The residency gate on a scripted timeline: who goes at once, who waits,
// and what wakes each waiter.
#include "router/residency_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
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

// A cold turn (its prefix gone from the instance it was routed to) that
// must wait there takes another instance's room at once: the one with the
// least room free that fits it (best fit), whatever the instances' order,
// so the instances with room keep it for their own sessions.
TEST(ResidencyGateTest, AColdWaiterTakesTheFullestInstanceItFits) {
  ResidencyGate g(Opts());
  std::vector<uint64_t> woken;
  auto cold = [](int64_t footprint) {
    ResidencyGate::Turn t{footprint, kCap};
    t.movable = true;
    return t;
  };
  EXPECT_EQ(g.Enter(0, "a", 10, kCap, At(0), &woken), 0u);  // 80 free
  EXPECT_EQ(g.Enter(1, "b", 60, kCap, At(0), &woken), 0u);  // 30 free
  EXPECT_EQ(g.Enter(2, "c", 20, kCap, At(0), &woken), 0u);  // 70 free
  EXPECT_EQ(g.Enter(3, "d", 80, kCap, At(0), &woken), 0u);  // 10 free
  const uint64_t e = g.Enter(3, "e", cold(25), At(1), &woken);
  ASSERT_NE(e, 0u);
  EXPECT_THAT(woken, ElementsAre(e));
  EXPECT_EQ(g.TakeMove(e), 1);
  EXPECT_EQ(g.resident_tokens(1), 85);
  EXPECT_EQ(g.counters().moved, 1u);
  // Instance 1 has no room left for the next: the fullest that fits is 2.
  woken.clear();
  const uint64_t f = g.Enter(3, "f", cold(25), At(2), &woken);
  EXPECT_THAT(woken, ElementsAre(f));
  EXPECT_EQ(g.TakeMove(f), 2);
  EXPECT_EQ(g.resident_tokens(2), 45);
  // One that fits nowhere waits where it was routed.
  woken.clear();
  const uint64_t big = g.Enter(3, "big", cold(85), At(3), &woken);
  EXPECT_NE(big, 0u);
  EXPECT_TRUE(woken.empty());
  EXPECT_EQ(g.waiting(), 1u);
}

ResidencyGate::Turn Reloadable(int64_t footprint, double reload_s) {
  ResidencyGate::Turn t{footprint, kCap};
  t.reload_s = reload_s;
  return t;
}

// A tier that keeps the residents is the instance's capacity: a turn whose
// prefix the tier holds goes within it, past the GPU pool. A cold turn goes
// at once only within the GPU's room; else it waits, and the next turn to
// end there lets it in within the tier's room.
TEST(ResidencyGateTest, ATierIsTheRoomOfWarmTurnsAndTheGpuOfColdOnes) {
  ResidencyGate g(Opts());
  std::vector<uint64_t> woken;
  auto tiered = [](int64_t footprint, bool movable) {
    ResidencyGate::Turn t{footprint, /*capacity_tokens=*/3 * kCap};
    t.gpu_capacity_tokens = kCap;
    t.movable = movable;
    t.reload_s = 0.1;
    return t;
  };
  EXPECT_EQ(g.Enter(0, "a", tiered(60, /*movable=*/true), At(0), &woken), 0u);
  EXPECT_EQ(g.Enter(0, "b", tiered(60, /*movable=*/false), At(0), &woken), 0u);
  EXPECT_EQ(g.resident_tokens(0), 120) << "past the GPU pool, within the tier";
  const uint64_t c = g.Enter(0, "c", tiered(60, /*movable=*/true), At(1), &woken);
  EXPECT_NE(c, 0u) << "a cold turn needs the GPU's room";
  EXPECT_EQ(g.counters().swapped_in, 0u) << "nobody idle to swap out";
  g.Leave(0, "a", 60, At(2), &woken);
  EXPECT_THAT(woken, ElementsAre(c));
  EXPECT_EQ(g.resident_tokens(0), 180);
  EXPECT_EQ(g.counters().admitted_after_wait, 1u);
}

// On an instance with a host tier, a turn whose reload beats the wait goes
// at once when residents have been idle longer than sessions take to come
// back (swap_after: 2 x the reuse gap, at most grace; grace before any gap
// is learned): they are swapped out, the longest idle first, until it fits.
TEST(ResidencyGateTest, AReloadableTurnSwapsLongIdleResidentsOut) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 30, kCap, At(0), &woken);
  g.Enter(0, "b", 30, kCap, At(0), &woken);
  g.Enter(0, "c", 30, kCap, At(0), &woken);
  g.Leave(0, "b", 30, At(1), &woken);  // idle longest
  g.Leave(0, "a", 30, At(2), &woken);  // idle since 2; c still runs
  EXPECT_EQ(g.expected_wait(), absl::Seconds(10)) << "grace before any wait";
  EXPECT_EQ(g.swap_after(), absl::Seconds(10));
  EXPECT_EQ(g.Enter(0, "d", Reloadable(30, 0.5), At(12), &woken), 0u);
  EXPECT_EQ(g.counters().swapped_in, 1u);
  EXPECT_EQ(g.counters().swapped_out, 1u);
  EXPECT_FALSE(g.Find("b").has_value()) << "the longest idle went";
  EXPECT_TRUE(g.Find("a").has_value());
  EXPECT_EQ(g.resident_tokens(0), 90);
  // b's next turn comes back the same way, swapping a out.
  EXPECT_EQ(g.Enter(0, "b", Reloadable(30, 0.5), At(13), &woken), 0u);
  EXPECT_FALSE(g.Find("a").has_value());
  EXPECT_EQ(g.counters().swapped_out, 2u);
  EXPECT_TRUE(woken.empty());
}

// A reload longer than the expected wait, or no room beside the active
// residents and those idle for less than swap_after: the turn waits and
// nobody is swapped.
TEST(ResidencyGateTest, ASlowOrRoomlessReloadWaitsAsAnyOther) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 40, kCap, At(0), &woken);
  g.Enter(0, "b", 40, kCap, At(0), &woken);
  g.Leave(0, "a", 40, At(1), &woken);
  EXPECT_NE(g.Enter(0, "slow", Reloadable(40, 12), At(5), &woken), 0u);
  EXPECT_NE(g.Enter(0, "big", Reloadable(60, 0.1), At(5), &woken), 0u)
      << "b's 40 active tokens and 60 exceed 90";
  EXPECT_NE(g.Enter(0, "soon", Reloadable(40, 0.1), At(5), &woken), 0u)
      << "a, idle 4 s, may still come back";
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

// The reuse gap is learned from residents' returns; on an instance with a
// host tier a waiter gets the room of a resident idle for twice that gap,
// not a grace time later, and the resident counts as swapped out.
TEST(ResidencyGateTest, ATieredInstanceLetsWaitersInAfterTheReuseGap) {
  ResidencyGate g(Opts(/*quantum=*/1000, /*grace_s=*/10));
  std::vector<uint64_t> woken;
  g.Enter(0, "a", 45, kCap, At(0), &woken);
  g.Enter(0, "b", Reloadable(45, 0), At(0), &woken);
  g.Leave(0, "b", 45, At(1), &woken);
  g.Enter(0, "b", Reloadable(45, 0), At(3), &woken);  // back after 2 s
  EXPECT_EQ(g.reuse_gap(), absl::Seconds(9.2));
  for (int i = 0; i < 60; ++i) {
    g.Leave(0, "b", 45, At(4 + 3 * i), &woken);
    g.Enter(0, "b", Reloadable(45, 0), At(6 + 3 * i), &woken);
  }
  const absl::Duration after = g.swap_after();
  EXPECT_GT(after, absl::Seconds(4));
  EXPECT_LT(after, absl::Seconds(4.2));
  g.Leave(0, "a", 45, At(200), &woken);
  const uint64_t c = g.Enter(0, "c", Reloadable(45, 0.5), At(201), &woken);
  ASSERT_NE(c, 0u) << "a has been idle 1 s";
  EXPECT_EQ(g.NextEvent(), At(200) + after);
  g.Tick(At(200) + after, &woken);
  EXPECT_THAT(woken, ElementsAre(c));
  EXPECT_FALSE(g.Find("a").has_value());
  EXPECT_EQ(g.counters().swapped_out, 1u);
  EXPECT_EQ(g.counters().expired, 0u);
}

// yield_grown: a resident's next turn whose grown context no longer fits
// beside the others gives its place up and queues as a new session's turn;
// growth that fits, or a session alone on its instance, goes at once. Off,
// the grown turn goes at once, past the fill.
TEST(ResidencyGateTest, AResidentThatOutgrowsItsRoomQueuesWhenAsked) {
  for (const bool yield : {false, true}) {
    SCOPED_TRACE(yield ? "yield_grown" : "default");
    ResidencyGate::Options o = Opts(/*quantum=*/100, /*grace_s=*/10);
    o.yield_grown = yield;
    ResidencyGate g(o);
    std::vector<uint64_t> woken;
    ASSERT_EQ(g.Enter(0, "solo", 80, kCap, At(0), &woken), 0u);
    g.Leave(0, "solo", 80, At(1), &woken);
    EXPECT_EQ(g.Enter(0, "solo", 120, kCap, At(2), &woken), 0u) << "alone: it goes";
    g.Leave(0, "solo", 120, At(3), &woken);
    ResidencyGate h(o);
    ASSERT_EQ(h.Enter(0, "a", 40, kCap, At(0), &woken), 0u);
    ASSERT_EQ(h.Enter(0, "b", 40, kCap, At(0), &woken), 0u);
    h.Leave(0, "a", 40, At(1), &woken);
    EXPECT_EQ(h.Enter(0, "a", 45, kCap, At(2), &woken), 0u) << "85 of 90: it fits";
    h.Leave(0, "a", 45, At(3), &woken);
    const uint64_t grown = h.Enter(0, "a", 55, kCap, At(4), &woken);
    if (!yield) {
      EXPECT_EQ(grown, 0u);
      EXPECT_EQ(h.resident_tokens(0), 95);
      EXPECT_EQ(h.counters().yielded_grown, 0u);
      continue;
    }
    ASSERT_NE(grown, 0u) << "95 of 90: it queues";
    EXPECT_EQ(h.counters().yielded_grown, 1u);
    EXPECT_FALSE(h.IsResident(0, "a"));
    EXPECT_EQ(h.resident_tokens(0), 40);
    h.Leave(0, "b", 40, At(5), &woken);
    EXPECT_TRUE(woken.empty()) << "b, idle, may still come back";
    h.Tick(At(15), &woken);  // b idle for the grace time
    EXPECT_THAT(woken, ElementsAre(grown));
    EXPECT_EQ(h.resident_tokens(0), 55);
  }
}

// Several replicas: the sessions other replicas hold resident on an
// instance fill it as this gate's own do; a session resident both here and
// there counts once; one resident at a peer goes at once (its next turn);
// room the peers free wakes a waiter; one past its bound goes regardless.
TEST(ResidencyGateTest, OtherReplicasResidentsFillTheInstance) {
  ResidencyGate g(Opts(/*quantum=*/100, /*grace_s=*/10, /*max_wait_s=*/20));
  std::vector<uint64_t> woken;
  g.SetPeerResidents(0, {{"p1", 40}, {"p2", 30}}, /*waiting_turns=*/0, At(0), &woken);
  EXPECT_EQ(g.peer_resident_tokens(0), 70);
  EXPECT_EQ(g.Enter(0, "a", 20, kCap, At(0), &woken), 0u);  // 70 + 20 <= 90
  const uint64_t b = g.Enter(0, "b", 20, kCap, At(0), &woken);
  EXPECT_NE(b, 0u) << "70 of the peers' + 20 + 20 > 90";
  // p1's next turn comes here: it goes at once, and counts once.
  EXPECT_EQ(g.Enter(0, "p1", 40, kCap, At(1), &woken), 0u);
  EXPECT_EQ(g.resident_tokens(0), 60);
  EXPECT_EQ(g.peer_resident_tokens(0), 30);
  EXPECT_EQ(g.demand_tokens(0), 90);
  // The peer that held p2 lets it go: b fits and is woken.
  g.SetPeerResidents(0, {{"p1", 40}}, /*waiting_turns=*/0, At(2), &woken);
  EXPECT_THAT(woken, ElementsAre(b));
  woken.clear();
  // Peers fill the instance; a waiter past its bound still goes.
  g.SetPeerResidents(0, {{"p1", 40}, {"q", 500}}, /*waiting_turns=*/0, At(3), &woken);
  const uint64_t c = g.Enter(0, "c", 10, kCap, At(3), &woken);
  ASSERT_NE(c, 0u);
  g.Tick(At(23), &woken);
  EXPECT_THAT(woken, ElementsAre(c));
  // Published: this gate's own residents.
  std::vector<std::pair<std::string, int64_t>> mine = g.Residents(0);
  std::sort(mine.begin(), mine.end());
  EXPECT_THAT(mine, ElementsAre(std::pair<std::string, int64_t>{"a", 20},
                                std::pair<std::string, int64_t>{"b", 20},
                                std::pair<std::string, int64_t>{"c", 10},
                                std::pair<std::string, int64_t>{"p1", 40}));
}

// Several replicas: turns waiting for room on an instance elsewhere (the
// other replicas', or this one's the cluster store refused) contend for it
// here too: an idle resident leaves after the grace time (on Tick, which
// departs it for the store to release), and a resident that has had its
// quantum yields when its turn ends. Uncontended, both stay.
TEST(ResidencyGateTest, TurnsWaitingAtOtherReplicasFreeRoomHere) {
  ResidencyGate g(Opts(/*quantum=*/2, /*grace_s=*/10, /*max_wait_s=*/100));
  std::vector<uint64_t> woken;
  EXPECT_EQ(g.Enter(0, "idle", 30, kCap, At(0), &woken), 0u);
  g.Leave(0, "idle", 30, At(1), &woken);
  EXPECT_EQ(g.Enter(0, "busy", 30, kCap, At(0), &woken), 0u);
  g.Leave(0, "busy", 30, At(1), &woken);
  EXPECT_EQ(g.Enter(0, "busy", 30, kCap, At(2), &woken), 0u);
  g.TakeDepartures();  // the cluster store's side keeps departures from here on
  // Nobody waits: past the grace time the idle one stays.
  g.Tick(At(20), &woken);
  EXPECT_TRUE(g.Find("idle").has_value());
  EXPECT_FALSE(g.NextEvent().has_value());

  g.SetPeerResidents(0, {}, /*waiting_turns=*/1, At(20), &woken);
  EXPECT_EQ(g.NextEvent(), At(11)) << "the idle resident's grace time";
  g.Tick(At(20), &woken);
  EXPECT_FALSE(g.Find("idle").has_value());
  EXPECT_EQ(g.counters().expired, 1u);
  // busy's second turn since it became resident ends: its quantum is up.
  g.Leave(0, "busy", 30, At(21), &woken);
  EXPECT_FALSE(g.Find("busy").has_value());
  EXPECT_EQ(g.counters().yielded, 1u);
  EXPECT_THAT(g.TakeDepartures(), ElementsAre(std::pair<int, std::string>{0, "idle"},
                                              std::pair<int, std::string>{0, "busy"}));
  EXPECT_TRUE(g.TakeDepartures().empty());
}

TEST(ResidencyGateTest, ASessionsTurnsThroughOtherReplicasCountTowardsItsQuantum) {
  ResidencyGate g(Opts(/*quantum=*/3, /*grace_s=*/1000, /*max_wait_s=*/1000));
  std::vector<uint64_t> woken;
  // Resident at a peer: its turn through this replica goes at once.
  g.SetPeerResidents(0, {{"s", 60}}, /*waiting_turns=*/1, At(0), &woken);
  EXPECT_EQ(g.Enter(0, "s", 60, kCap, At(0), &woken), 0u);
  // The store counted two turns of it before this one, through the others:
  // this one is its third, and the instance is contended, so it yields.
  g.SetTurns(0, "s", 2);
  g.Leave(0, "s", 60, At(1), &woken);
  EXPECT_FALSE(g.Find("s").has_value());
  EXPECT_EQ(g.counters().yielded, 1u);

  // Without the store's count it would have run its quantum here alone.
  g.SetPeerResidents(0, {{"t", 60}}, /*waiting_turns=*/1, At(2), &woken);
  EXPECT_EQ(g.Enter(0, "t", 60, kCap, At(2), &woken), 0u);
  g.Leave(0, "t", 60, At(3), &woken);
  EXPECT_TRUE(g.Find("t").has_value());
  // A count for a session not resident here changes nothing.
  g.SetTurns(0, "nobody", 5);
  g.SetTurns(7, "t", 5);
  EXPECT_EQ(g.resident_sessions(0), 1u);
}

}  // namespace
}  // namespace kvroute::router
