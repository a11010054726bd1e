// The router's predictions for every policy and the time factors it learns
// from first tokens (sampled when the response ends) and offloads'
// transfers (router/rate_learner.h), end to end through the Router facade
// with an injected clock. Figures of
// placement_cost_test.cc: 10,000 prefill tokens/s, 1e-5 s of transfer per
// token plus 0.1 s; 4 prompt bytes per token.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "router/prefix_hash.h"
#include "router/router.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::router {
namespace {

using testing::LoopbackBackends;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

Options RatesOptions(const std::string& mode) {
  Options o = testing::PlacementTestOptions();
  o.mode = mode;
  o.offload_cost_known = true;
  return o;
}

std::unique_ptr<Router> Make(const Options& o, int n = 2) {
  auto r = Router::Create(o, LoopbackBackends(n));
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

// A cold streamed prompt of `tokens` tokens, unique per `id`.
RequestFeatures Req(int id, int64_t tokens, bool stream = true) {
  RequestFeatures f;
  f.request_id = absl::StrCat("r", id);
  f.model = "m";
  f.stream = stream;
  const std::string head = absl::StrCat(id, "-");
  f.prompt_bytes = head + std::string(static_cast<size_t>(tokens * 4) - head.size(), 'x');
  f.chunk_hashes = HashPromptChunks(f.prompt_bytes, 256);
  return f;
}

double PrefillFactor(const Router& r, int b) { return r.Report()[b].prefill_time_factor; }

// Routes a request, sees its first token `ttft_s` later, completes it;
// returns the prediction.
double RouteAndServe(Router& r, const RequestFeatures& f, double ttft_s, absl::Time& now) {
  absl::StatusOr<RouteTicket> t = r.Route(f, now);
  EXPECT_TRUE(t.ok()) << t.status();
  const double predicted = t->decision.predicted_ttft_s;
  now += absl::Seconds(ttft_s);
  r.OnFirstToken(*t, now);
  r.OnComplete(*t, {.ok = true, .served_by = t->decision.decode_backend}, now);
  now += absl::Seconds(1);
  return predicted;
}

// Routes a cold prompt of 10,000 tokens, unique per `id`, away from
// instance 0: onto instance 1, whose rates the tests read.
RouteTicket RouteToSecond(Router& r, int id, absl::Time now) {
  RequestFeatures f = Req(id, 10000);
  f.avoid_backends = {0};
  absl::StatusOr<RouteTicket> t = r.Route(f, now);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// With the fleet's rates known every policy's decision carries the cost
// model's prediction: 10,000 cold tokens on an idle instance, 1 s.
TEST(RouterRatesTest, PredictsForEveryPolicyWhenRatesAreKnown) {
  for (const char* mode : {"round_robin", "least_loaded", "baseline", "v1", "v1_cost", "v2"}) {
    auto r = Make(RatesOptions(mode));
    absl::StatusOr<RouteTicket> t = r->Route(Req(1, 10000), kT0);
    ASSERT_TRUE(t.ok()) << mode;
    EXPECT_NEAR(t->decision.predicted_ttft_s, 1.0, 1e-9) << mode;
    EXPECT_EQ(t->decision.predicted_transfer_s, -1) << mode;
  }
  // Without them (no profile, no offload_cost keys) only the placement
  // policies predict, from their defaults.
  Options o = RatesOptions("baseline");
  o.offload_cost_known = false;
  auto r = Make(o);
  EXPECT_EQ(r->Route(Req(1, 10000), kT0)->decision.predicted_ttft_s, -1);
}

// v2 with the threshold gate offloads a cold HEAVY request from instance 1
// to 0 without a cost of its own: the router predicts S = 2.5 s, X = 0.1 +
// 25,000 x 1e-5 = 0.35 s.
TEST(RouterRatesTest, PredictsAnOffloadTheGateChose) {
  Options o = RatesOptions("v2");
  o.offload_gate = "threshold";
  auto r = Make(o);
  absl::StatusOr<RouteTicket> t = r->Route(Req(1, 25000), kT0);
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->decision.mode, DecisionMode::kOffload);
  EXPECT_EQ(t->decision.prefill_backend, 1);
  EXPECT_EQ(t->decision.decode_backend, 0);
  EXPECT_NEAR(t->decision.predicted_transfer_s, 0.35, 1e-9);
  EXPECT_NEAR(t->decision.predicted_ttft_s, 2.85, 1e-9);
}

// Instance 1 serves 10,000 cold tokens in 2 s where its profile says 1 s:
// its factor converges to 2 (the samples are absolute: each prediction
// already holds the factor learned so far, which the learner divides out),
// and the prediction with it; instance 0's stays 1. WARM and unstreamed
// requests teach nothing.
TEST(RouterRatesTest, LearnsASlowInstanceFromFirstTokens) {
  auto r = Make(RatesOptions("baseline"));
  absl::Time now = kT0;
  double predicted = 0;
  for (int i = 0; i < 30; ++i) {
    RequestFeatures f = Req(i, 10000);
    f.avoid_backends = {0};
    predicted = RouteAndServe(*r, f, 2.0, now);
  }
  EXPECT_NEAR(predicted, 2.0, 0.03);
  EXPECT_NEAR(PrefillFactor(*r, 1), 2.0, 0.02);
  EXPECT_EQ(r->Report()[1].prefill_time_samples, 30);
  EXPECT_EQ(PrefillFactor(*r, 0), 1.0);
  // The learned factor is in the next prediction: 2 x 1 s.
  RequestFeatures next = Req(100, 10000);
  next.avoid_backends = {0};
  EXPECT_NEAR(r->Route(next, now)->decision.predicted_ttft_s, PrefillFactor(*r, 1), 1e-9);

  RequestFeatures warm = Req(101, 1000);  // under warm_new_tokens
  warm.avoid_backends = {0};
  RouteAndServe(*r, warm, 5.0, now);
  RequestFeatures plain = Req(102, 10000, /*stream=*/false);
  plain.avoid_backends = {0};
  RouteAndServe(*r, plain, 20.0, now);
  EXPECT_EQ(r->Report()[1].prefill_time_samples, 30);
}

// The engine found 9,000 of the 10,000 tokens estimated cold cached (a
// session's previous turn whose blocks the router had not seen yet) and
// served the first token in the 0.1 s its 1,000 new tokens take: the sample,
// taken when the response ends, prices the prefill at the engine's count, so
// the instance's factor stays 1, and cold prompts after it are still
// predicted at their full 1 s. Without the engine's count (no
// prompt_tokens_details) the same TTFTs are samples of a tenfold faster
// instance.
TEST(RouterRatesTest, LearnsAgainstTheEnginesCachedCount) {
  auto r = Make(RatesOptions("baseline"));
  absl::Time now = kT0;
  for (int i = 0; i < 30; ++i) {
    const RouteTicket t = RouteToSecond(*r, i, now);
    ASSERT_EQ(t.decision.cached_tokens_est, 0);
    now += absl::Seconds(0.1);
    r->OnFirstToken(t, now);
    EXPECT_EQ(r->Report()[1].prefill_time_samples, i);  // not before the end
    now += absl::Seconds(2);
    r->OnComplete(t, {.ok = true, .prompt_tokens = 10000, .cached_tokens = 9000, .served_by = 1},
                  now);
  }
  EXPECT_EQ(r->Report()[1].prefill_time_samples, 30);
  EXPECT_NEAR(PrefillFactor(*r, 1), 1.0, 1e-6);
  RequestFeatures cold = Req(100, 10000);
  cold.avoid_backends = {0};
  EXPECT_NEAR(r->Route(cold, now)->decision.predicted_ttft_s, 1.0, 1e-6);

  auto blind = Make(RatesOptions("baseline"));
  for (int i = 0; i < 30; ++i) {
    RequestFeatures f = Req(i, 10000);
    f.avoid_backends = {0};
    RouteAndServe(*blind, f, 0.1, now);  // cached_tokens unknown
  }
  EXPECT_NEAR(PrefillFactor(*blind, 1), 0.1, 0.01);
}

// A turn that waited after routing (for its reservation across replicas)
// and is sent only then (Router::Sent) counts its TTFT from there: an
// instance that serves 10,000 cold tokens in the predicted 1 s keeps its
// factor 1 however long the waits were.
TEST(RouterRatesTest, AWaitBeforeSendingTeachesNothing) {
  auto r = Make(RatesOptions("baseline"));
  absl::Time now = kT0;
  for (int i = 0; i < 30; ++i) {
    const RouteTicket t = RouteToSecond(*r, i, now);
    now += absl::Seconds(3);  // the store refused it meanwhile
    r->Sent(t, now, -1);
    now += absl::Seconds(1);
    r->OnFirstToken(t, now);
    r->Sent(t, now + absl::Seconds(5), -1);  // after its first token: nothing
    r->OnComplete(t, {.ok = true, .served_by = 1}, now);
    now += absl::Seconds(1);
  }
  EXPECT_EQ(r->Report()[1].prefill_time_samples, 30);
  EXPECT_NEAR(PrefillFactor(*r, 1), 1.0, 1e-6);
}

// Several replicas: a replica publishes the factors it has learned (none
// before its first sample), and predicts with the fleet's merged factor the
// cluster store hands back, in place of its own, until a view without one.
TEST(RouterRatesTest, PredictsWithThePeersMergedFactor) {
  auto r = Make(RatesOptions("baseline"));
  absl::Time now = kT0;
  EXPECT_EQ(r->LocalLoad()[1].prefill_time_factor, 0);  // nothing learned yet
  for (int i = 0; i < 30; ++i) {
    RequestFeatures f = Req(i, 10000);
    f.avoid_backends = {0};
    RouteAndServe(*r, f, 2.0, now);
  }
  EXPECT_NEAR(r->LocalLoad()[1].prefill_time_factor, 2.0, 0.02);
  EXPECT_EQ(r->LocalLoad()[0].prefill_time_factor, 0);

  std::vector<PeerLoad> fleet(2);
  fleet[1].prefill_time_factor = 3.0;  // the replicas' factors, merged
  r->SetPeerLoad(fleet, now);
  RequestFeatures next = Req(100, 10000);
  next.avoid_backends = {0};
  absl::StatusOr<RouteTicket> shared = r->Route(next, now);
  ASSERT_TRUE(shared.ok());
  EXPECT_NEAR(shared->decision.predicted_ttft_s, 3.0, 1e-9);
  r->OnComplete(*shared, {.ok = false}, now);
  // The own factor is unchanged; a view without one falls back to it.
  EXPECT_NEAR(PrefillFactor(*r, 1), 2.0, 0.02);
  r->SetPeerLoad({}, now);
  RequestFeatures again = Req(101, 10000);
  again.avoid_backends = {0};
  EXPECT_NEAR(r->Route(again, now)->decision.predicted_ttft_s, PrefillFactor(*r, 1), 1e-9);
}

// v1_cost decides MEDIUM requests by the placement cost under
// heavy_threshold auto. On an idle fleet both instances tie and the first
// wins, until it has been learned to be twice as slow.
TEST(RouterRatesTest, LearnedSlowInstanceLosesThePlacement) {
  Options o = RatesOptions("v1_cost");
  o.heavy_threshold_auto = true;
  auto r = Make(o);
  absl::Time now = kT0;
  EXPECT_EQ(r->Route(Req(0, 10000), now)->decision.decode_backend, 0);
  r = Make(o);
  for (int i = 1; i <= 20; ++i) {
    RequestFeatures f = Req(i, 10000);
    f.avoid_backends = {1};
    RouteAndServe(*r, f, 2.0, now);
  }
  ASSERT_GT(PrefillFactor(*r, 0), 1.9);
  absl::StatusOr<RouteTicket> t = r->Route(Req(50, 10000), now);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->decision.decode_backend, 1);
  EXPECT_NEAR(t->decision.predicted_ttft_s, 1.0, 1e-9);
}

// Offloads from 1 to 0 whose handoff measures 1.05 s where the profile
// says 0.35 s: the pair's factor and the fleet's converge to 3 and the next
// offload's predicted transfer is 3 x 0.35 s. The measurement may arrive
// after the request completed.
TEST(RouterRatesTest, LearnsThePairsTransferFromOffloads) {
  Options o = RatesOptions("v2");
  o.offload_gate = "threshold";
  auto r = Make(o);
  absl::Time now = kT0;
  for (int i = 0; i < 40; ++i) {
    absl::StatusOr<RouteTicket> t = r->Route(Req(i, 25000), now);
    ASSERT_TRUE(t.ok());
    ASSERT_EQ(t->decision.mode, DecisionMode::kOffload);
    now += absl::Seconds(1);
    r->OnFirstToken(*t, now);
    r->OnComplete(*t, {.ok = true, .served_by = 0, .kv_transferred = true}, now);
    r->OnTransfer(*t, 1.05);
  }
  const RouterStats s = r->Stats();
  EXPECT_NEAR(s.transfer_time_factor, 3.0, 0.01);
  ASSERT_EQ(s.transfer_time_factors.size(), 1u);
  EXPECT_EQ(s.transfer_time_factors[0].prefill_backend, 1);
  EXPECT_EQ(s.transfer_time_factors[0].decode_backend, 0);
  EXPECT_NEAR(s.transfer_time_factors[0].factor, 3.0, 0.01);
  EXPECT_EQ(s.transfer_time_factors[0].samples, 40);
  absl::StatusOr<RouteTicket> t = r->Route(Req(99, 25000), now);
  ASSERT_TRUE(t.ok());
  EXPECT_NEAR(t->decision.predicted_transfer_s, 0.35 * s.transfer_time_factors[0].factor, 1e-9);
  // Co-located prefill is no transfer: the instance factors are untouched.
  EXPECT_EQ(PrefillFactor(*r, 0), 1.0);
  EXPECT_EQ(PrefillFactor(*r, 1), 1.0);
}

TEST(RouterRatesTest, LearnsNothingWhenDisabled) {
  Options o = RatesOptions("v2");
  o.offload_gate = "threshold";
  o.rate_learning.enabled = false;
  auto r = Make(o);
  absl::Time now = kT0;
  for (int i = 0; i < 5; ++i) {
    RequestFeatures f = Req(i, 10000);
    f.avoid_backends = {0};
    RouteAndServe(*r, f, 3.0, now);  // 3x the profile's 1 s
    absl::StatusOr<RouteTicket> t = r->Route(Req(100 + i, 25000), now);
    ASSERT_TRUE(t.ok());
    r->OnTransfer(*t, 10 * t->decision.predicted_transfer_s);
    r->OnComplete(*t, {.ok = false}, now);
  }
  EXPECT_EQ(PrefillFactor(*r, 1), 1.0);
  EXPECT_EQ(r->Report()[1].prefill_time_samples, 0);
  EXPECT_TRUE(r->Stats().transfer_time_factors.empty());
  EXPECT_EQ(r->Stats().transfer_time_factor, 1.0);
}

}  // namespace
}  // namespace kvroute::router
