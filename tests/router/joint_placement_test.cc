// Modes v1_cost and v2 (offload_gate: joint) over hand-built fleets, with
// the figures of placement_cost_test.cc: 10,000 prefill tokens/s, 1e-5 s
// of transfer per token plus 0.1 s, SLOs 2 / 10 / 30 s and TPOT 0.1 s,
// streams with 100 tokens left.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "router/policy_registry.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::router {
namespace {

using testing::Fleet;
using testing::SetCached;
using testing::SetDecoding;
using testing::SetPrefill;
using testing::SetUnhealthy;

Options JointOptions() { return testing::PlacementTestOptions(); }

Decision Decide(const std::string& mode, const FleetSnapshot& f, Options o = JointOptions()) {
  o.mode = mode;
  auto p = MakePolicy(o, std::vector<BackendSpec>(f.backends.size()));
  EXPECT_TRUE(p.ok()) << p.status();
  absl::StatusOr<Decision> d = (*p)->Decide(f);
  EXPECT_TRUE(d.ok()) << d.status();
  return *d;
}

TEST(JointPlacementTest, V2IsJointByDefault) {
  Options o;
  o.mode = "v2";
  auto p = MakePolicy(o, std::vector<BackendSpec>(2));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->name(), "v2");
  EXPECT_EQ(o.offload_gate, "joint");
}

// Idle fleet, cold HEAVY: no streams to spare, so no offload; every
// instance ties and the first wins. TTFT = 40000 / 1e4.
TEST(JointPlacementTest, IdleFleetColocates) {
  const auto f = Fleet(3, 40000);
  for (const char* mode : {"v1_cost", "v2"}) {
    const Decision d = Decide(mode, f);
    EXPECT_EQ(d.mode, DecisionMode::kColocated) << mode;
    EXPECT_EQ(d.decode_backend, 0) << mode;
    EXPECT_EQ(d.request_class, RequestClass::kHeavy);
    EXPECT_DOUBLE_EQ(d.predicted_ttft_s, 4.0);
    EXPECT_EQ(d.predicted_transfer_s, -1);
  }
}

// A cold HEAVY request goes where it stalls nobody when such an instance
// exists: moving it beats moving the KV.
TEST(JointPlacementTest, ColdHeavyAvoidsStreams) {
  auto f = Fleet(3, 40000);
  SetDecoding(f, {8, 0, 3});
  for (const char* mode : {"v1_cost", "v2"}) {
    const Decision d = Decide(mode, f);
    EXPECT_EQ(d.mode, DecisionMode::kColocated) << mode;
    EXPECT_EQ(d.decode_backend, 1) << mode;
  }
}

// v1 takes the fewest decoding requests whatever the queue; v1_cost weighs
// instance 0's 30 s queue (34 / 30 = 1.13) against one stream stalled on
// instance 1 (4 / 30 + 0.4 + 0.4 = 0.93).
TEST(JointPlacementTest, V1CostWeighsQueueAgainstStall) {
  auto f = Fleet(2, 40000);
  SetDecoding(f, {0, 1});
  SetPrefill(f, {300000, 0});
  EXPECT_EQ(Decide("v1", f).decode_backend, 0);
  const Decision d = Decide("v1_cost", f);
  EXPECT_EQ(d.decode_backend, 1);
  EXPECT_DOUBLE_EQ(d.predicted_ttft_s, 4.0);
}

// The session's home (affinity holds) serves 8 streams: v1_cost stays there
// (co-location only), v2 prefills on the instance with the fewest streams
// and hands the KV over (placement_cost_test.cc "offload_spares_busy_home",
// here with instance 1's queue empty: TTFT 3.8 + 0.48).
TEST(JointPlacementTest, V2OffloadsOffBusyHome) {
  auto f = Fleet(3, 40000);
  f.footprint_tokens_est = 40000;
  SetCached(f, {2000, 2000, 2000});
  SetDecoding(f, {8, 1, 2});
  f.session_backend = 0;
  const Decision colo = Decide("v1_cost", f);
  EXPECT_EQ(colo.mode, DecisionMode::kColocated);
  EXPECT_EQ(colo.decode_backend, 0);
  EXPECT_TRUE(colo.affinity_hit);

  const Decision off = Decide("v2", f);
  EXPECT_EQ(off.mode, DecisionMode::kOffload);
  EXPECT_EQ(off.prefill_backend, 1);
  EXPECT_EQ(off.decode_backend, 0);
  EXPECT_TRUE(off.affinity_hit);
  EXPECT_FALSE(off.affinity_broken);
  EXPECT_NEAR(off.predicted_ttft_s, 4.28, 1e-9);
  EXPECT_NEAR(off.predicted_transfer_s, 0.48, 1e-9);
}

// Instance 0 is idle and instance 1 has 5,000 tokens queued: COLO(0) = 4 s
// wins against 4.5 s, until instance 0 is learned to prefill at half its
// profile's rate (8 s).
TEST(JointPlacementTest, LearnedSlowInstanceLosesThePlacement) {
  auto f = Fleet(2, 40000);
  SetPrefill(f, {0, 5000});
  for (const char* mode : {"v1_cost", "v2"}) {
    EXPECT_EQ(Decide(mode, f).decode_backend, 0) << mode;
  }
  f.backends[0].prefill_time_factor = 2;
  for (const char* mode : {"v1_cost", "v2"}) {
    const Decision d = Decide(mode, f);
    EXPECT_EQ(d.mode, DecisionMode::kColocated) << mode;
    EXPECT_EQ(d.decode_backend, 1) << mode;
    EXPECT_NEAR(d.predicted_ttft_s, 4.5, 1e-9) << mode;
  }
}

// V2OffloadsOffBusyHome's offload: with the pair (1, 0) learned twice as
// fast as modelled its transfer is 0.24 s (TTFT 4.04). Learned 20x slower
// (X = 9.6 s, TTFT 13.4) under a 2 s HEAVY SLO, its cost 13.4 / 2 + 0.741
// loses to prefilling on instance 2 instead (4.28 / 2 + 0.76 + 0.722).
TEST(JointPlacementTest, LearnedTransferFactorChangesTheOffload) {
  auto f = Fleet(3, 40000);
  f.footprint_tokens_est = 40000;
  SetCached(f, {2000, 2000, 2000});
  SetDecoding(f, {8, 1, 2});
  f.session_backend = 0;
  f.transfer_time_factors = std::vector<double>(9, 1.0);
  f.transfer_time_factors[1 * 3 + 0] = 0.5;
  Decision d = Decide("v2", f);
  EXPECT_EQ(d.mode, DecisionMode::kOffload);
  EXPECT_EQ(d.prefill_backend, 1);
  EXPECT_NEAR(d.predicted_transfer_s, 0.24, 1e-9);
  EXPECT_NEAR(d.predicted_ttft_s, 4.04, 1e-9);

  Options o = JointOptions();
  o.slo.ttft_heavy_s = 2;
  EXPECT_EQ(Decide("v2", f, o).prefill_backend, 1);
  f.transfer_time_factors[1 * 3 + 0] = 20;
  d = Decide("v2", f, o);
  EXPECT_EQ(d.mode, DecisionMode::kOffload);
  EXPECT_EQ(d.prefill_backend, 2);
  EXPECT_EQ(d.decode_backend, 0);
  EXPECT_NEAR(d.predicted_transfer_s, 0.48, 1e-9);
}

// The same, but the home holds most of the prompt: A would recompute it,
// so v2 abstains and serves at home.
TEST(JointPlacementTest, V2NeverRecomputesHomePrefix) {
  auto f = Fleet(3, 60000);
  SetCached(f, {25000, 2000, 2000});
  SetDecoding(f, {8, 1, 2});
  f.session_backend = 0;
  const Decision d = Decide("v2", f);
  EXPECT_EQ(d.request_class, RequestClass::kHeavy);
  EXPECT_EQ(d.mode, DecisionMode::kColocated);
  EXPECT_EQ(d.decode_backend, 0);
}

// The threshold pre-filters: a MEDIUM request is routed as baseline with
// no prediction, unless heavy_threshold is auto.
TEST(JointPlacementTest, AutoThresholdDecidesMedium) {
  auto f = Fleet(2, 10000);
  SetDecoding(f, {8, 0});
  SetPrefill(f, {0, 2000});
  Decision d = Decide("v2", f);
  EXPECT_EQ(d.request_class, RequestClass::kMedium);
  // baseline's token cost: 10000 x (1 + 8 stalled streams) against 12000.
  EXPECT_EQ(d.decode_backend, 1);
  EXPECT_EQ(d.predicted_ttft_s, -1);  // the joint decision did not decide

  Options o = JointOptions();
  o.heavy_threshold_auto = true;
  d = Decide("v2", f, o);
  EXPECT_EQ(d.request_class, RequestClass::kMedium);
  EXPECT_EQ(d.decode_backend, 1);  // 1.2 s of TTFT beats stalling 8 streams
  EXPECT_NEAR(d.predicted_ttft_s, 1.2, 1e-9);

  // WARM stays with baseline even then.
  auto warm = Fleet(2, 10000);
  SetCached(warm, {9000, 0});
  SetDecoding(warm, {8, 0});
  d = Decide("v2", warm, o);
  EXPECT_EQ(d.request_class, RequestClass::kWarm);
  EXPECT_EQ(d.decode_backend, 0);
  EXPECT_EQ(d.predicted_ttft_s, -1);
}

// An overloaded session home is left while another instance is healthy;
// an unhealthy one never serves.
TEST(JointPlacementTest, AffinityRules) {
  auto f = Fleet(3, 40000);
  f.session_backend = 2;
  f.backends[2].inflight_tokens = 200000;  // mean 66667, limit 133333
  Decision d = Decide("v2", f);
  EXPECT_NE(d.decode_backend, 2);
  EXPECT_NE(d.prefill_backend, 2);
  EXPECT_TRUE(d.affinity_broken);

  SetUnhealthy(f, {0, 1});
  d = Decide("v2", f);
  EXPECT_EQ(d.decode_backend, 2);  // the overloaded one is all there is

  auto g = Fleet(2, 40000);
  SetUnhealthy(g, {0});
  SetDecoding(g, {0, 9});
  d = Decide("v2", g);
  EXPECT_EQ(d.mode, DecisionMode::kColocated);
  EXPECT_EQ(d.decode_backend, 1);
}

}  // namespace
}  // namespace kvroute::router
