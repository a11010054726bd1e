// Admission by deadline: the verdict's arithmetic, and the router refusing a
// request whose predicted TTFT is past its deadline without reserving anything.
#include "router/shed.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "router/prefix_hash.h"
#include "router/router.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::router {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

Decision Predicted(RequestClass c, double ttft_s) {
  Decision d;
  d.request_class = c;
  d.predicted_ttft_s = ttft_s;
  return d;
}

TEST(JudgeShedTest, DeadlinesAreFactorTimesTheClassSloUnlessSet) {
  ShedOptions o;
  o.ttft_factor = 4;
  o.running_session_factor = 2;
  const TtftSlos slo{2, 10, 30};
  EXPECT_FALSE(JudgeShed(o, slo, Predicted(RequestClass::kHeavy, 120), false).shed);
  const ShedVerdict heavy = JudgeShed(o, slo, Predicted(RequestClass::kHeavy, 130.2), false);
  EXPECT_TRUE(heavy.shed);
  EXPECT_DOUBLE_EQ(heavy.deadline_s, 120);
  EXPECT_NEAR(heavy.retry_after_s, 10.2, 1e-9);  // the excess
  // An excess under min_retry_after_s advises that minimum.
  EXPECT_DOUBLE_EQ(JudgeShed(o, slo, Predicted(RequestClass::kHeavy, 120.3), false).retry_after_s,
                   o.min_retry_after_s);
  // A running session's turn gets twice as long.
  const ShedVerdict running = JudgeShed(o, slo, Predicted(RequestClass::kHeavy, 130.2), true);
  EXPECT_FALSE(running.shed);
  EXPECT_DOUBLE_EQ(running.deadline_s, 240);
  EXPECT_TRUE(JudgeShed(o, slo, Predicted(RequestClass::kWarm, 8.5), false).shed);
  EXPECT_FALSE(JudgeShed(o, slo, Predicted(RequestClass::kWarm, 8.5), true).shed);
  // Never shorter than a new turn's longest (HEAVY's 120 s): twice WARM's
  // 8 s would be 16.
  const ShedVerdict warm = JudgeShed(o, slo, Predicted(RequestClass::kWarm, 100), true);
  EXPECT_FALSE(warm.shed);
  EXPECT_DOUBLE_EQ(warm.deadline_s, 120);
  EXPECT_TRUE(JudgeShed(o, slo, Predicted(RequestClass::kWarm, 121), true).shed);
  // Set outright; Retry-After within its bounds.
  o.ttft_deadline_medium_s = 5;
  const ShedVerdict medium = JudgeShed(o, slo, Predicted(RequestClass::kMedium, 500), false);
  EXPECT_TRUE(medium.shed);
  EXPECT_DOUBLE_EQ(medium.deadline_s, 5);
  EXPECT_DOUBLE_EQ(medium.retry_after_s, 60);
  // No prediction, or shedding off: never shed.
  EXPECT_FALSE(JudgeShed(o, slo, Predicted(RequestClass::kMedium, -1), false).shed);
  o.enabled = false;
  EXPECT_FALSE(JudgeShed(o, slo, Predicted(RequestClass::kMedium, 500), false).shed);
}

RequestFeatures Prompt(char fill, size_t bytes) {
  RequestFeatures f;
  f.request_id = std::string(1, fill);
  f.model = "m";
  // Distinct prompts: no request finds another's prefix cached.
  for (size_t i = 0; f.prompt_bytes.size() < bytes; ++i) {
    f.prompt_bytes += fill;
    f.prompt_bytes += std::to_string(i);
  }
  f.chunk_hashes = HashPromptChunks(f.prompt_bytes, 256);
  f.allow_shed = true;
  return f;
}

TEST(RouterShedTest, ARequestQueuedPastItsDeadlineIsShedAndReservesNothing) {
  Options o;
  o.mode = "baseline";
  o.offload_cost_known = true;
  o.offload_cost.prefill_tokens_per_second = 1000;
  o.shed.ttft_factor = 1;  // HEAVY deadline: 30 s
  auto made = Router::Create(o, testing::LoopbackBackends(2));
  ASSERT_TRUE(made.ok()) << made.status();
  Router& r = **made;
  // 25,000-token prompts (4 bytes a token): 25 s of prefill each.
  auto a = r.Route(Prompt('a', 100000), kT0);
  auto b = r.Route(Prompt('b', 100000), kT0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(a->shed.shed);
  EXPECT_FALSE(b->shed.shed);
  EXPECT_NE(a->decision.decode_backend, b->decision.decode_backend);
  // A third would queue behind one of them: 50 s to its first token.
  auto c = r.Route(Prompt('c', 100000), kT0);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->shed.shed);
  EXPECT_EQ(c->id, 0u);
  EXPECT_GT(c->decision.predicted_ttft_s, 30);
  EXPECT_DOUBLE_EQ(c->shed.deadline_s, 30);
  EXPECT_EQ(r.Stats().inflight_requests, 2);
  EXPECT_EQ(r.Stats().shed_new_sessions, 1);
  // Without allow_shed (a caller that cannot answer 429) it is routed.
  RequestFeatures plain = Prompt('d', 100000);
  plain.allow_shed = false;
  auto d = r.Route(plain, kT0);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->shed.shed);
  EXPECT_EQ(r.Stats().inflight_requests, 3);
  // Once the queue drains, the same request goes.
  for (const auto& t : {*a, *b, *d}) r.OnComplete(t, Outcome{}, kT0 + absl::Seconds(60));
  auto again = r.Route(Prompt('c', 100000), kT0 + absl::Seconds(61));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->shed.shed);
}

// A session turn the overload rule moves off its crowded instance, and that
// would prefill cold past its deadline where it goes, is sent to its own
// instance instead when that one serves it in time: the rule spreads load,
// it does not refuse turns. A policy that keeps no session on an instance
// (least_loaded) is judged where it placed the turn.
TEST(RouterShedTest, ATurnMovedPastItsDeadlineStaysOnItsInstance) {
  for (const char* mode : {"baseline", "least_loaded"}) {
    SCOPED_TRACE(mode);
    const bool homes = std::string(mode) == "baseline";
    Options o;
    o.mode = mode;
    o.offload_cost_known = true;
    o.offload_cost.prefill_tokens_per_second = 1000;
    o.shed.ttft_factor = 1;  // WARM: 2 s, and 10 s for a running session's turn
    o.shed.ttft_deadline_heavy_s = 10;  // (a new turn's longest, 30 s, would set it)
    auto made = Router::Create(o, testing::LoopbackBackends(3));
    ASSERT_TRUE(made.ok()) << made.status();
    Router& r = **made;
    RequestFeatures first = Prompt('s', 40000);  // 10,000 tokens
    first.session_id = "s";
    first.avoid_backends = {1, 2};
    auto s1 = r.Route(first, kT0);
    ASSERT_TRUE(s1.ok()) << s1.status();
    ASSERT_EQ(s1->decision.decode_backend, 0);
    r.OnComplete(*s1, {.ok = true, .prompt_tokens = 10000, .cached_tokens = 0, .served_by = 0},
                 kT0);
    // x decodes a 50,000-token context on gpu0: more than twice the fleet's
    // mean in flight there, nothing queued for prefill.
    RequestFeatures big = Prompt('x', 200000);
    big.avoid_backends = {1, 2};
    big.allow_shed = false;
    auto x = r.Route(big, kT0);
    ASSERT_TRUE(x.ok()) << x.status();
    r.OnFirstToken(*x, kT0);
    // s's next turn: 12,000 tokens, 10,000 of them cached on gpu0 (2 s to
    // prefill there), cold elsewhere (12 s, past its 10 s).
    RequestFeatures next = Prompt('s', 48000);
    next.session_id = "s";
    auto s2 = r.Route(next, kT0 + absl::Seconds(1));
    ASSERT_TRUE(s2.ok()) << s2.status();
    EXPECT_EQ(s2->shed.shed, !homes);
    EXPECT_FALSE(s1->decision.shed_averted_home);
    EXPECT_EQ(r.Stats().shed_averted_home, homes ? 1 : 0);
    EXPECT_EQ(r.Stats().shed_running_sessions, homes ? 0 : 1);
    if (homes) {
      EXPECT_EQ(s2->decision.decode_backend, 0);
      EXPECT_TRUE(s2->decision.affinity_hit);
      EXPECT_TRUE(s2->decision.shed_averted_home);
      EXPECT_LT(s2->decision.predicted_ttft_s, 10);
      EXPECT_GE(s2->decision.cached_tokens_est, 9900);
    }
  }
}

// Two instances of 1,000 tokens (900 may be resident); a turn of 2,000
// prompt bytes has a footprint of 756 tokens, so one session fills one.
// Session a is resident on 0, c on 1; b, routed to 1 with a cold prefix,
// is held there until room frees anywhere.
struct HeldOnOne {
  explicit HeldOnOne(Router& r) {
    a = *r.Route(Turn("a", 'a', /*avoid=*/1), kT0);
    c = *r.Route(Turn("c", 'c', /*avoid=*/0), kT0);
    b = *r.Route(Turn("b", 'b', /*avoid=*/0), kT0);
  }
  static RequestFeatures Turn(const std::string& session, char fill, int avoid) {
    RequestFeatures f = Prompt(fill, 2000);
    f.session_id = session;
    f.defer_kv_reservation = true;
    f.avoid_backends = {avoid};
    return f;
  }
  RouteTicket a, b, c;
};

std::unique_ptr<Router> TwoSmallInstances() {
  Options o;
  o.mode = "baseline";
  o.residency.quantum_turns = 1;
  o.residency.grace = absl::Seconds(10);
  o.residency.max_wait = absl::Hours(1);
  std::vector<BackendSpec> fleet = testing::LoopbackBackends(2);
  for (BackendSpec& b : fleet) b.capacity_tokens = 1000;
  return *Router::Create(o, std::move(fleet));
}

TEST(RouterResidencyTest, AHeldColdTurnMovesWithItsLoadToTheRoomThatFreesFirst) {
  std::unique_ptr<Router> r = TwoSmallInstances();
  std::vector<uint64_t> woken;
  r->SetResidencyListener([&](absl::Span<const uint64_t> ids) {
    woken.insert(woken.end(), ids.begin(), ids.end());
  });
  HeldOnOne s(*r);
  ASSERT_EQ(s.b.decision.decode_backend, 1);
  ASSERT_NE(s.b.residency_wait, 0u);
  EXPECT_TRUE(r->Held(s.b));
  r->Dispatch(s.a, kT0);
  r->Dispatch(s.c, kT0);
  // a's turn ends; once it has been idle for the grace time, b takes its room.
  r->OnComplete(s.a, {.ok = true, .prompt_tokens = 500, .cached_tokens = 0, .served_by = 0,
                      .completion_tokens = 256},
                kT0 + absl::Seconds(1));
  EXPECT_TRUE(woken.empty());
  EXPECT_EQ(r->NextResidencyEvent(), kT0 + absl::Seconds(11));
  r->TickResidency(kT0 + absl::Seconds(11));
  EXPECT_EQ(woken, std::vector<uint64_t>{s.b.residency_wait});
  EXPECT_FALSE(r->Held(s.b));
  const Router::Dispatched go = r->Dispatch(s.b, kT0 + absl::Seconds(11));
  EXPECT_EQ(go.decision.decode_backend, 0);
  EXPECT_EQ(go.decision.prefill_backend, 0);
  EXPECT_GE(go.cached_tokens_est, 0);
  const auto report = r->Report();
  EXPECT_EQ(report[0].inflight_requests, 1);  // b
  EXPECT_EQ(report[1].inflight_requests, 1);  // c
  EXPECT_GT(report[0].inflight_prefill_tokens, 0);
  r->OnComplete(s.b, Outcome{}, kT0 + absl::Seconds(2));
  r->OnComplete(s.c, Outcome{}, kT0 + absl::Seconds(2));
  for (const BackendReport& b : r->Report()) EXPECT_EQ(b.inflight_requests, 0);
  // The session's next turn finds its home where it went.
  RequestFeatures next = HeldOnOne::Turn("b", 'b', /*avoid=*/-1);
  next.avoid_backends.clear();
  auto n = r->Route(next, kT0 + absl::Seconds(3));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->decision.decode_backend, 0);
  r->SetResidencyListener(nullptr);
}

TEST(RouterResidencyTest, ATurnAdmittedWhereItCannotGoIsSentWhereRouted) {
  std::unique_ptr<Router> r = TwoSmallInstances();
  HeldOnOne s(*r);
  r->OnComplete(s.a, {.ok = true, .prompt_tokens = 500, .served_by = 0, .completion_tokens = 256},
                kT0 + absl::Seconds(1));
  r->TickResidency(kT0 + absl::Seconds(11));
  EXPECT_FALSE(r->Held(s.b));
  r->SetHealthy(0, false);  // the instance whose room it took is ejected meanwhile
  const Router::Dispatched go = r->Dispatch(s.b, kT0 + absl::Seconds(1));
  EXPECT_EQ(go.decision.decode_backend, 1);
  EXPECT_EQ(r->Report()[1].inflight_requests, 2);
}

TEST(RouterResidencyTest, AHeldTurnWhoseClientLeavesGivesItsPlaceUp) {
  std::unique_ptr<Router> r = TwoSmallInstances();
  HeldOnOne s(*r);
  EXPECT_EQ(r->ResidencyWaiting(), 1u);
  r->Unhold(s.b, kT0 + absl::Seconds(1));
  EXPECT_EQ(r->ResidencyWaiting(), 0u);
  EXPECT_FALSE(r->Held(s.b));
  r->OnComplete(s.b, Outcome{}, kT0 + absl::Seconds(1));
  EXPECT_EQ(r->Report()[1].inflight_requests, 1);  // c's only
}

}  // namespace
}  // namespace kvroute::router
