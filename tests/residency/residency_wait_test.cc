// ResidencyWait over a real router on a fake clock: a held turn wakes when a
// turn ends, when an idle resident's grace runs out, when its own wait runs
// out, and gives its place up when its client leaves. One io_context in the
// test thread; time moves only by FakeWaitClock::Advance and Tick.
#include "residency/residency_wait.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

namespace kvroute::residency {
namespace {

namespace net = boost::asio;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// One instance of 1,000 tokens (900 may be resident); a turn of 2,000
// prompt bytes (500 tokens at 4 bytes a token) and 100 output tokens has a
// footprint of 600, so two sessions' turns do not fit together.
std::unique_ptr<router::Router> OneInstance(absl::Duration grace, absl::Duration max_wait,
                                            int quantum = 8) {
  router::Options o;
  o.mode = "baseline";
  o.residency.grace = grace;
  o.residency.max_wait = max_wait;
  o.residency.quantum_turns = quantum;
  std::vector<router::BackendSpec> fleet{{.name = "a", .host = "h", .port = 1, .capacity_tokens = 1000}};
  return *router::Router::Create(o, std::move(fleet));
}

router::RequestFeatures Turn(const std::string& session) {
  router::RequestFeatures f;
  f.model = "m";
  f.session_id = session;
  f.stream = true;
  f.max_tokens = 100;
  f.prompt_bytes = std::string(2000, static_cast<char>('a' + session.size()));
  f.prompt_bytes.replace(0, session.size(), session);
  f.defer_kv_reservation = true;
  return f;
}

router::Outcome Done(int64_t prompt_tokens) {
  router::Outcome o;
  o.ok = true;
  o.served_by = 0;
  o.prompt_tokens = prompt_tokens;
  o.cached_tokens = 0;
  o.completion_tokens = 100;
  return o;
}

class ResidencyWaitTest : public ::testing::Test {
 protected:
  void Start(const router::RouteTicket& t, std::optional<ResidencyWait::Admitted>& out,
             net::cancellation_signal* cancel = nullptr) {
    auto run = [this, t, &out]() -> net::awaitable<void> { out = co_await wait_->Admit(t); };
    if (cancel != nullptr) {
      net::co_spawn(ioc_, run, net::bind_cancellation_slot(cancel->slot(), net::detached));
    } else {
      net::co_spawn(ioc_, run, net::detached);
    }
    Poll();
  }
  // Runs what is ready (an io_context that ran out of work stops: restart it).
  void Poll() {
    ioc_.restart();
    ioc_.poll();
  }
  void Use(std::unique_ptr<router::Router> r) {
    router_ = std::move(r);
    wait_ = std::make_unique<ResidencyWait>(*router_, clock_);
  }
  router::RouteTicket Route(const std::string& session) {
    return *router_->Route(Turn(session), clock_.Now());
  }

  net::io_context ioc_;
  FakeWaitClock clock_{kT0};
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<ResidencyWait> wait_;
};

TEST_F(ResidencyWaitTest, ATurnThatFitsIsDispatchedAtOnce) {
  Use(OneInstance(absl::Seconds(10), absl::Seconds(100)));
  const router::RouteTicket a = Route("a");
  EXPECT_EQ(a.residency_wait, 0u);
  std::optional<ResidencyWait::Admitted> go;
  Start(a, go);
  ASSERT_TRUE(go.has_value());
  EXPECT_FALSE(go->gone);
  EXPECT_EQ(go->waited_s, 0);
  EXPECT_EQ(go->dispatched.decision.decode_backend, 0);
  EXPECT_GE(go->dispatched.cached_tokens_est, 0) << "a deferred request is pinned at dispatch";
}

TEST_F(ResidencyWaitTest, AHeldTurnWakesWhenTheResidentsTurnEndsAndYields) {
  Use(OneInstance(absl::Hours(1), absl::Hours(1), /*quantum=*/1));
  const router::RouteTicket a = Route("a");
  std::optional<ResidencyWait::Admitted> go_a, go_b;
  Start(a, go_a);
  const router::RouteTicket b = Route("b");
  ASSERT_NE(b.residency_wait, 0u) << "b's KV does not fit beside a's";
  Start(b, go_b);
  EXPECT_FALSE(go_b.has_value());
  EXPECT_EQ(wait_->waiting(), 1u);
  clock_.Advance(absl::Seconds(3));
  router_->OnComplete(a, Done(500), clock_.Now());  // a's quantum is used up: it yields
  Poll();
  ASSERT_TRUE(go_b.has_value());
  EXPECT_FALSE(go_b->gone);
  EXPECT_DOUBLE_EQ(go_b->waited_s, 3);
  EXPECT_EQ(wait_->waiting(), 0u);
  EXPECT_EQ(wait_->counters().yielded, 1u);
  EXPECT_EQ(wait_->counters().admitted_after_wait, 1u);
}

TEST_F(ResidencyWaitTest, TheTimerPathAdmitsOnceAnIdleResidentsGraceRunsOut) {
  Use(OneInstance(absl::Seconds(10), absl::Seconds(100)));
  const router::RouteTicket a = Route("a");
  std::optional<ResidencyWait::Admitted> go_a, go_b;
  Start(a, go_a);
  router_->OnComplete(a, Done(500), clock_.Now());  // a is idle, still resident
  const router::RouteTicket b = Route("b");
  ASSERT_NE(b.residency_wait, 0u);
  Start(b, go_b);
  EXPECT_EQ(router_->NextResidencyEvent(), kT0 + absl::Seconds(10)) << "a's grace";
  clock_.Advance(absl::Seconds(9));
  wait_->Tick();
  Poll();
  EXPECT_FALSE(go_b.has_value()) << "a may still come back";
  clock_.Advance(absl::Seconds(1));
  wait_->Tick();
  Poll();
  ASSERT_TRUE(go_b.has_value());
  EXPECT_DOUBLE_EQ(go_b->waited_s, 10);
  EXPECT_EQ(wait_->counters().expired, 1u);
}

TEST_F(ResidencyWaitTest, AWaitThatRunsOutGoesWhileTheResidentYields) {
  Use(OneInstance(absl::Hours(1), absl::Seconds(30)));
  const router::RouteTicket a = Route("a");  // a's turn runs on, past b's bound
  std::optional<ResidencyWait::Admitted> go_a, go_b;
  Start(a, go_a);
  const router::RouteTicket b = Route("b");
  Start(b, go_b);
  EXPECT_EQ(router_->NextResidencyEvent(), kT0 + absl::Seconds(30));
  clock_.Advance(absl::Seconds(30));
  wait_->Tick();
  Poll();
  ASSERT_TRUE(go_b.has_value());
  EXPECT_FALSE(go_b->gone);
  EXPECT_DOUBLE_EQ(go_b->waited_s, 30);
  EXPECT_EQ(wait_->counters().admitted_by_timeout, 1u);
  EXPECT_EQ(wait_->counters().yielded_forced, 1u);
}

TEST_F(ResidencyWaitTest, AClientThatLeavesGivesItsPlaceUp) {
  Use(OneInstance(absl::Hours(1), absl::Hours(1), /*quantum=*/1));
  const router::RouteTicket a = Route("a");
  std::optional<ResidencyWait::Admitted> go_a, go_b, go_c;
  Start(a, go_a);
  const router::RouteTicket b = Route("b");
  net::cancellation_signal leave_b;
  Start(b, go_b, &leave_b);
  const router::RouteTicket c = Route("c");
  Start(c, go_c);
  EXPECT_EQ(wait_->waiting(), 2u);
  leave_b.emit(net::cancellation_type::terminal);  // b's client closed its connection
  Poll();
  ASSERT_TRUE(go_b.has_value());
  EXPECT_TRUE(go_b->gone);
  EXPECT_EQ(wait_->waiting(), 1u) << "b's place is given up at once, not at max_wait";
  EXPECT_FALSE(router_->Held(b));
  router_->OnComplete(b, router::Outcome{}, clock_.Now());
  router_->OnComplete(a, Done(500), clock_.Now());
  Poll();
  ASSERT_TRUE(go_c.has_value()) << "c, behind b, goes when a yields";
  EXPECT_FALSE(go_c->gone);
}

TEST_F(ResidencyWaitTest, ReleaseAllSendsEveryHeldTurnAndHoldsNoLaterOne) {
  Use(OneInstance(absl::Hours(1), absl::Hours(1)));
  const router::RouteTicket a = Route("a");
  std::optional<ResidencyWait::Admitted> go_a, go_b, go_c;
  Start(a, go_a);
  const router::RouteTicket b = Route("b");
  Start(b, go_b);
  EXPECT_FALSE(go_b.has_value());
  wait_->ReleaseAll();
  Poll();
  ASSERT_TRUE(go_b.has_value());
  EXPECT_FALSE(go_b->gone);
  EXPECT_EQ(wait_->waiting(), 0u);
  const router::RouteTicket c = Route("c");
  Start(c, go_c);
  ASSERT_TRUE(go_c.has_value());
  EXPECT_EQ(wait_->waiting(), 0u);
}

}  // namespace
}  // namespace kvroute::residency
