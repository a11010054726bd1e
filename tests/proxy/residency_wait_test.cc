// ResidencyWait: a held request sleeps until a Leave makes room, then goes.
// Runs on one io_context in the test thread; the gate's grace and max_wait
// are an hour, so only the Leave can wake the waiter.
#include "proxy/residency_wait.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "proxy/proxy_metrics.h"

namespace kvroute::proxy {
namespace {

void StartEnter(net::io_context& ioc, ResidencyWait& w, int backend, std::string session,
                int64_t footprint, std::optional<double>& waited) {
  net::co_spawn(
      ioc,
      [&w, backend, session, footprint, &waited]() -> net::awaitable<void> {
        waited = co_await w.Enter(backend, session, footprint, /*capacity_tokens=*/100);
      },
      net::detached);
}

router::ResidencyGate::Options HourLong(int quantum) {
  router::ResidencyGate::Options o;
  o.fill = 0.9;
  o.quantum_turns = quantum;
  o.grace = absl::Hours(1);
  o.max_wait = absl::Hours(1);
  return o;
}

TEST(ResidencyWaitTest, AHeldTurnGoesWhenTheResidentYields) {
  net::io_context ioc;
  ResidencyWait w(HourLong(/*quantum=*/1));
  std::optional<double> a, b;
  StartEnter(ioc, w, 0, "a", 60, a);
  StartEnter(ioc, w, 0, "b", 60, b);
  ioc.poll();
  EXPECT_EQ(a, 0.0);
  EXPECT_FALSE(b.has_value()) << "b's KV does not fit beside a's";
  EXPECT_EQ(w.waiting(), 1u);
  w.Leave(0, "a", 62);  // a's turn ends; its quantum is used up
  ioc.poll();
  ASSERT_TRUE(b.has_value());
  EXPECT_GE(*b, 0.0);
  EXPECT_EQ(w.waiting(), 0u);
  EXPECT_EQ(w.counters().yielded, 1u);
  EXPECT_EQ(w.counters().admitted_after_wait, 1u);
}

TEST(ResidencyWaitTest, ATurnThatFitsGoesAtOnce) {
  net::io_context ioc;
  ResidencyWait w(HourLong(/*quantum=*/8));
  std::optional<double> a, b;
  StartEnter(ioc, w, 0, "a", 40, a);
  StartEnter(ioc, w, 0, "b", 40, b);
  ioc.poll();
  EXPECT_EQ(a, 0.0);
  EXPECT_EQ(b, 0.0);
  EXPECT_EQ(w.counters().admitted_at_once, 2u);
}


TEST(ResidencyWaitTest, DrainingReleasesEveryHeldTurn) {
  net::io_context ioc;
  ResidencyWait w(HourLong(/*quantum=*/100));
  std::optional<double> a, b, c;
  StartEnter(ioc, w, 0, "a", 60, a);
  StartEnter(ioc, w, 0, "b", 60, b);
  ioc.poll();
  ASSERT_FALSE(b.has_value());
  w.ReleaseAll();
  ioc.poll();
  EXPECT_TRUE(b.has_value());
  EXPECT_EQ(w.waiting(), 0u);
  ioc.restart();  // it ran out of work
  StartEnter(ioc, w, 0, "c", 60, c);  // after the drain began: never held
  ioc.poll();
  EXPECT_EQ(c, 0.0);
  EXPECT_EQ(w.waiting(), 0u);
}

TEST(ResidencyWaitTest, CountersAreExported) {
  net::io_context ioc;
  ResidencyWait w(HourLong(/*quantum=*/1));
  std::optional<double> a, b;
  StartEnter(ioc, w, 0, "a", 60, a);
  StartEnter(ioc, w, 0, "b", 60, b);
  ioc.poll();
  metrics::Registry reg;
  RegisterResidencyCounters(reg, &w);
  std::string text = reg.Render();
  EXPECT_NE(text.find("kvroute_residency_turns_total{outcome=\"at_once\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("kvroute_residency_waiting 1\n"), std::string::npos) << text;
  w.Leave(0, "a", 60);
  ioc.poll();
  text = reg.Render();
  EXPECT_NE(text.find("kvroute_residency_turns_total{outcome=\"after_wait\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("kvroute_residency_releases_total{cause=\"quantum\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("kvroute_residency_waiting 0\n"), std::string::npos);
}

TEST(ResidencyWaitTest, NothingIsExportedWhenTheGateIsOff) {
  router::ResidencyGate::Options off;
  off.enabled = false;
  ResidencyWait w(off);
  metrics::Registry reg;
  RegisterResidencyCounters(reg, &w);
  EXPECT_EQ(reg.Render().find("kvroute_residency"), std::string::npos);
}

}  // namespace
}  // namespace kvroute::proxy
