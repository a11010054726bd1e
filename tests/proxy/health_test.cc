// HealthTracker: active thresholds, the passive circuit breaker, the
// doubling ejection, and that every routability change is reported once.
#include "proxy/health.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvroute::proxy {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

struct Recorder {
  std::vector<HealthChange> changes;
  HealthTracker::OnChange fn() {
    return [this](const HealthChange& c) { changes.push_back(c); };
  }
};

HealthOptions Opts() {
  HealthOptions o;
  o.unhealthy_after = 2;
  o.healthy_after = 2;
  o.passive_failures = 3;
  o.ejection = absl::Seconds(5);
  o.max_ejection = absl::Seconds(12);
  return o;
}

TEST(HealthTrackerTest, ActiveChecksNeedConsecutiveStreaks) {
  Recorder rec;
  HealthTracker h(2, Opts(), rec.fn());
  h.OnProbe(0, false, kT0);
  h.OnProbe(0, true, kT0);  // streak broken
  h.OnProbe(0, false, kT0);
  EXPECT_TRUE(h.Routable(0));
  h.OnProbe(0, false, kT0);
  EXPECT_FALSE(h.Routable(0));
  ASSERT_EQ(rec.changes.size(), 1u);
  EXPECT_EQ(rec.changes[0].backend, 0);
  EXPECT_FALSE(rec.changes[0].routable);
  EXPECT_EQ(rec.changes[0].reason, "health_check");
  h.OnProbe(0, false, kT0);  // no second report
  h.OnProbe(0, true, kT0);
  EXPECT_FALSE(h.Routable(0));
  h.OnProbe(0, true, kT0);
  EXPECT_TRUE(h.Routable(0));
  ASSERT_EQ(rec.changes.size(), 2u);
  EXPECT_TRUE(rec.changes[1].routable);
  EXPECT_EQ(rec.changes[1].reason, "health_check_recovered");
  EXPECT_TRUE(h.Routable(1));
}

TEST(HealthTrackerTest, ConsecutiveRequestFailuresOpenTheBreaker) {
  Recorder rec;
  HealthTracker h(1, Opts(), rec.fn());
  h.OnRequest(0, false, kT0);
  h.OnRequest(0, false, kT0);
  h.OnRequest(0, true, kT0);  // a success resets the count
  h.OnRequest(0, false, kT0);
  h.OnRequest(0, false, kT0);
  EXPECT_TRUE(h.Routable(0));
  h.OnRequest(0, false, kT0);
  EXPECT_FALSE(h.Routable(0));
  EXPECT_EQ(h.Get(0).breaker, BreakerState::kOpen);
  ASSERT_EQ(rec.changes.size(), 1u);
  EXPECT_EQ(rec.changes[0].reason, "passive_failures");
  // Failures of requests already in flight do not extend the ejection.
  h.OnRequest(0, false, kT0 + absl::Seconds(1));
  EXPECT_EQ(h.Get(0).open_until, kT0 + absl::Seconds(5));
  EXPECT_EQ(rec.changes.size(), 1u);
}

TEST(HealthTrackerTest, HalfOpenClosesOnSuccessAndReopensWithDoubling) {
  Recorder rec;
  HealthTracker h(1, Opts(), rec.fn());
  for (int i = 0; i < 3; ++i) h.OnRequest(0, false, kT0);
  h.Tick(kT0 + absl::Seconds(4));
  EXPECT_FALSE(h.Routable(0));
  h.Tick(kT0 + absl::Seconds(5));
  EXPECT_TRUE(h.Routable(0));
  EXPECT_EQ(h.Get(0).breaker, BreakerState::kHalfOpen);
  ASSERT_EQ(rec.changes.size(), 2u);
  EXPECT_EQ(rec.changes[1].reason, "ejection_expired");

  // One failure in half-open re-opens, for twice as long.
  const absl::Time t1 = kT0 + absl::Seconds(6);
  h.OnRequest(0, false, t1);
  EXPECT_FALSE(h.Routable(0));
  EXPECT_EQ(h.Get(0).open_until, t1 + absl::Seconds(10));
  EXPECT_EQ(rec.changes.back().reason, "half_open_failure");
  // Third time: capped at max_ejection.
  h.Tick(t1 + absl::Seconds(10));
  const absl::Time t2 = t1 + absl::Seconds(11);
  h.OnRequest(0, false, t2);
  EXPECT_EQ(h.Get(0).open_until, t2 + absl::Seconds(12));

  // A success in half-open closes the breaker and resets the doubling.
  h.Tick(t2 + absl::Seconds(12));
  h.OnRequest(0, true, t2 + absl::Seconds(12));
  EXPECT_EQ(h.Get(0).breaker, BreakerState::kClosed);
  EXPECT_EQ(h.Get(0).ejections_in_a_row, 0);
  EXPECT_TRUE(h.Routable(0));
  const absl::Time t3 = t2 + absl::Seconds(20);
  for (int i = 0; i < 3; ++i) h.OnRequest(0, false, t3);
  EXPECT_EQ(h.Get(0).open_until, t3 + absl::Seconds(5));
}

TEST(HealthTrackerTest, RoutableNeedsBothSources) {
  Recorder rec;
  HealthTracker h(1, Opts(), rec.fn());
  for (int i = 0; i < 3; ++i) h.OnRequest(0, false, kT0);
  h.OnProbe(0, false, kT0);
  h.OnProbe(0, false, kT0);  // already out: no new report
  EXPECT_EQ(rec.changes.size(), 1u);
  h.Tick(kT0 + absl::Seconds(5));  // half-open, but the checks still fail
  EXPECT_FALSE(h.Routable(0));
  EXPECT_EQ(rec.changes.size(), 1u);
  h.OnProbe(0, true, kT0);
  h.OnProbe(0, true, kT0);
  EXPECT_TRUE(h.Routable(0));
  ASSERT_EQ(rec.changes.size(), 2u);
  EXPECT_TRUE(rec.changes[1].routable);
}

TEST(HealthTrackerTest, OutOfRangeBackendsAreIgnored) {
  Recorder rec;
  HealthTracker h(1, Opts(), rec.fn());
  h.OnRequest(5, false, kT0);
  h.OnProbe(-1, false, kT0);
  EXPECT_FALSE(h.Routable(7));
  EXPECT_TRUE(rec.changes.empty());
}

}  // namespace

HealthOptions HungOpts() {
  HealthOptions o = Opts();
  o.hung_after = absl::Seconds(30);
  return o;
}

TEST(HealthTrackerTest, AnEngineWhoseCountersMoveIsBusyNotBroken) {
  Recorder rec;
  HealthTracker h(1, HungOpts(), rec.fn());
  EXPECT_FALSE(h.MakingProgress(0, kT0));  // nothing scraped yet: unknown
  // A long queue: it holds requests for minutes, its counters moving.
  for (int i = 0; i <= 20; ++i) {
    h.OnProgress(0, {/*holds_requests=*/true, 1000.0 * i}, kT0 + absl::Seconds(10 * i));
  }
  EXPECT_TRUE(h.Routable(0));
  EXPECT_TRUE(h.MakingProgress(0, kT0 + absl::Seconds(229)));
  EXPECT_TRUE(rec.changes.empty());
  // Idle with its counters still: not hung either.
  h.OnProgress(0, {false, 20000}, kT0 + absl::Seconds(300));
  h.OnProgress(0, {false, 20000}, kT0 + absl::Seconds(900));
  EXPECT_TRUE(h.Routable(0));
  EXPECT_TRUE(h.MakingProgress(0, kT0 + absl::Seconds(900)));
}

TEST(HealthTrackerTest, AnEngineHoldingRequestsWithStillCountersIsEjectedWhenDue) {
  Recorder rec;
  HealthTracker h(2, HungOpts(), rec.fn());
  h.OnProgress(0, {true, 500}, kT0);  // last progress
  h.OnProgress(0, {true, 500}, kT0 + absl::Seconds(15));
  h.OnProgress(0, {true, 500}, kT0 + absl::Seconds(29.9));
  EXPECT_TRUE(h.Routable(0));
  EXPECT_FALSE(h.MakingProgress(0, kT0 + absl::Seconds(30)));
  h.OnProgress(0, {true, 500}, kT0 + absl::Seconds(30));
  EXPECT_FALSE(h.Routable(0));
  ASSERT_EQ(rec.changes.size(), 1u);
  EXPECT_EQ(rec.changes[0].reason, "hung");
  EXPECT_EQ(h.Get(0).breaker, BreakerState::kOpen);
  EXPECT_EQ(h.Get(0).open_until, kT0 + absl::Seconds(35));
  EXPECT_TRUE(h.Routable(1));
  // Half-open after the ejection; still standing still: out again at once.
  h.Tick(kT0 + absl::Seconds(35));
  EXPECT_TRUE(h.Routable(0));
  h.OnProgress(0, {true, 500}, kT0 + absl::Seconds(36));
  EXPECT_FALSE(h.Routable(0));
  EXPECT_EQ(rec.changes.back().reason, "hung");
  // It moves again: progress, and back in after its (doubled) ejection.
  h.OnProgress(0, {true, 501}, kT0 + absl::Seconds(40));
  EXPECT_TRUE(h.MakingProgress(0, kT0 + absl::Seconds(40)));
  h.Tick(kT0 + absl::Seconds(46));
  EXPECT_TRUE(h.Routable(0));
}

TEST(HealthTrackerTest, WithoutACounterNoEngineIsJudgedHung) {
  Recorder rec;
  HealthTracker h(1, HungOpts(), rec.fn());
  h.OnProgress(0, {true, -1}, kT0);
  h.OnProgress(0, {true, -1}, kT0 + absl::Hours(1));
  EXPECT_TRUE(h.Routable(0));
  EXPECT_FALSE(h.MakingProgress(0, kT0 + absl::Hours(1)));
  HealthOptions off = HungOpts();
  off.hung_after = absl::ZeroDuration();
  HealthTracker never(1, off, rec.fn());
  never.OnProgress(0, {true, 7}, kT0);
  never.OnProgress(0, {true, 7}, kT0 + absl::Hours(1));
  EXPECT_TRUE(never.Routable(0));
  EXPECT_TRUE(rec.changes.empty());
}

}  // namespace kvroute::proxy
