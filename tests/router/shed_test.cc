// Admission by deadline: the verdict's arithmetic, and the router refusing a
// request whose predicted TTFT is past its deadline without reserving anything.
#include "router/shed.h"

#include <gtest/gtest.h>

#include <string>

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
  EXPECT_DOUBLE_EQ(heavy.retry_after_s, 11);  // the excess, rounded up
  // A running session's turn gets twice as long.
  const ShedVerdict running = JudgeShed(o, slo, Predicted(RequestClass::kHeavy, 130.2), true);
  EXPECT_FALSE(running.shed);
  EXPECT_DOUBLE_EQ(running.deadline_s, 240);
  EXPECT_TRUE(JudgeShed(o, slo, Predicted(RequestClass::kWarm, 8.5), false).shed);
  EXPECT_FALSE(JudgeShed(o, slo, Predicted(RequestClass::kWarm, 8.5), true).shed);
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

TEST(RouterRetargetTest, AHeldRequestMovesItsLoadAndEstimate) {
  Options o;
  o.mode = "baseline";
  auto made = Router::Create(o, testing::LoopbackBackends(3));
  ASSERT_TRUE(made.ok());
  Router& r = **made;
  RequestFeatures f = Prompt('x', 40000);
  f.session_id = "s";
  f.defer_kv_reservation = true;
  auto t = r.Route(f, kT0);
  ASSERT_TRUE(t.ok());
  const int from = t->decision.decode_backend;
  const int to = (from + 1) % 3;
  auto moved = r.Retarget(*t, to, kT0 + absl::Seconds(1));
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_EQ(moved->decode_backend, to);
  EXPECT_EQ(moved->prefill_backend, to);
  const auto report = r.Report();
  EXPECT_EQ(report[from].inflight_requests, 0);
  EXPECT_EQ(report[to].inflight_requests, 1);
  EXPECT_GT(report[to].inflight_prefill_tokens, 0);
  // Dispatched there, it completes there; nothing is left behind.
  EXPECT_GE(r.OnDispatch(*t, kT0 + absl::Seconds(1)), 0);
  EXPECT_FALSE(r.Retarget(*t, from, kT0).ok());  // no longer held
  r.OnComplete(*t, Outcome{}, kT0 + absl::Seconds(2));
  for (const BackendReport& b : r.Report()) EXPECT_EQ(b.inflight_requests, 0);
  // The session's next turn finds its home where it went.
  RequestFeatures next = Prompt('x', 40400);
  next.session_id = "s";
  auto n = r.Route(next, kT0 + absl::Seconds(3));
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->decision.decode_backend, to);
  // An unhealthy target is refused.
  r.SetHealthy((to + 1) % 3, false);
  RequestFeatures other = Prompt('y', 4000);
  other.session_id = "s2";
  other.defer_kv_reservation = true;
  auto u = r.Route(other, kT0 + absl::Seconds(4));
  ASSERT_TRUE(u.ok());
  EXPECT_FALSE(r.Retarget(*u, (to + 1) % 3, kT0).ok());
}

}  // namespace
}  // namespace kvroute::router
