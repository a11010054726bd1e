// The placement cost model against hand-computed cases.
//
// Every case uses one set of figures: 10,000 prefill tokens/s, no attention
// term unless the case sets one, 1e4 KV bytes per token over a 1e9 B/s link
// (1e-5 s per token) plus 0.1 s per transfer, SLOs WARM 2 s, MEDIUM 10 s,
// HEAVY 30 s, TPOT 0.1 s, and streams with 100 tokens left (a 10 s decode
// budget). The comment of each case gives the arithmetic.
#include "router/policies/placement_cost.h"

#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::router::placement {
namespace {

using testing::Fleet;
using testing::SetCached;
using testing::SetDecoding;
using testing::SetInflightTokens;
using testing::SetMemory;
using testing::SetPrefill;

PlacementParams Params() { return ParamsFromOptions(testing::PlacementTestOptions()); }

struct CostCase {
  std::string label;
  std::function<FleetSnapshot()> fleet;
  int prefill;
  int decode;
  double attention = 0;
  double want_ttft;
  double want_transfer;
  double want_stall;
  double want_warm;
  double want_evicted;
  double want_cost;
  Veto want_veto = Veto::kNone;
  bool decode_leg_after_prefill = true;
};

class PlacementCostTest : public ::testing::TestWithParam<CostCase> {};

TEST_P(PlacementCostTest, MatchesHandComputation) {
  const CostCase& c = GetParam();
  PlacementParams p = Params();
  p.rates.attention_s_per_token_pair = c.attention;
  p.decode_leg_after_prefill = c.decode_leg_after_prefill;
  const FleetSnapshot f = c.fleet();
  const PlanCost plan = c.prefill == c.decode
                            ? Colocated(f, c.prefill, RequestClass::kHeavy, p)
                            : Offload(f, c.prefill, c.decode, RequestClass::kHeavy, p);
  constexpr double kEps = 1e-9;
  EXPECT_EQ(plan.prefill_backend, c.prefill);
  EXPECT_EQ(plan.decode_backend, c.decode);
  EXPECT_NEAR(plan.ttft_s, c.want_ttft, kEps);
  EXPECT_NEAR(plan.transfer_s, c.want_transfer, kEps);
  EXPECT_NEAR(plan.stall, c.want_stall, kEps);
  EXPECT_NEAR(plan.warm, c.want_warm, kEps);
  EXPECT_NEAR(plan.evicted, c.want_evicted, kEps);
  EXPECT_NEAR(plan.cost, c.want_cost, kEps);
  EXPECT_EQ(plan.veto, c.want_veto) << ToString(plan.veto);
}

// A 40,000-token prompt, 2,000 cached on both instances, 8 streams on the
// decode home 0 and 1 on instance 1, which has 5,000 prefill tokens queued.
FleetSnapshot OffloadFleet() {
  auto f = Fleet(2, 40000);
  f.footprint_tokens_est = 40000;
  SetCached(f, {2000, 2000});
  SetDecoding(f, {8, 1});
  SetPrefill(f, {0, 5000});
  return f;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PlacementCostTest,
    ::testing::Values(
        // W = 10000/1e4 = 1, S = 40000/1e4 = 4: TTFT 5. stall = 4 x 4 / 10 =
        // 1.6, arrivals min(4, 1.6) = 1.6, warm = 1.6 x (4/2) / 2 = 1.6.
        // cost = 5/30 + 1.6 + 1.6.
        CostCase{"colo_queue_and_streams",
                 [] {
                   auto f = Fleet(1, 40000);
                   SetPrefill(f, {10000});
                   SetDecoding(f, {4});
                   return f;
                 },
                 0, 0, 0, 5, 0, 1.6, 1.6, 0, 5.0 / 30 + 3.2},
        // The same with 1 request decoding and 3 queued ahead (4 in
        // flight): FCFS, the queued ones decode while this prefill runs, so
        // the prefill stalls 4 streams all the same.
        CostCase{"colo_queued_requests_count_as_streams",
                 [] {
                   auto f = Fleet(1, 40000);
                   SetPrefill(f, {10000});
                   SetDecoding(f, {1});
                   testing::SetInflightRequests(f, {4});
                   return f;
                 },
                 0, 0, 0, 5, 0, 1.6, 1.6, 0, 5.0 / 30 + 3.2},
        // n = 20000 after c = 20000: S = 2 + 1e-8 x 20000 x (20000 + 10000)
        // = 8; no streams: cost 8/30.
        CostCase{"colo_attention_grows_with_context",
                 [] {
                   auto f = Fleet(1, 40000);
                   SetCached(f, {20000});
                   return f;
                 },
                 0, 0, 1e-8, 8, 0, 0, 0, 0, 8.0 / 30},
        // Pool 100000 holding 80000 in flight: the 40000 footprint waits for
        // 20000 to leave, M = 2; S = 4, TTFT 6. Resident 90000 + 40000 goes
        // 30000 past the pool: 3 s of re-prefill / 2 = 1.5. cost 6/30 + 1.5.
        CostCase{"colo_admission_and_eviction",
                 [] {
                   auto f = Fleet(1, 40000);
                   f.footprint_tokens_est = 40000;
                   SetMemory(f, {100000}, {90000});
                   SetInflightTokens(f, {80000});
                   return f;
                 },
                 0, 0, 0, 6, 0, 0, 0, 1.5, 6.0 / 30 + 1.5},
        // The decode home prefilling itself: S = 3.8, 8 streams: stall
        // 8 x 3.8 / 10 = 3.04, warm 3.04 x 1.9 / 2 = 2.888.
        CostCase{"colo_busy_home", OffloadFleet, 0, 0, 0, 3.8, 0, 3.04, 2.888, 0,
                 3.8 / 30 + 3.04 + 2.888},
        // OFF(1, 0): W_a = 0.5, S_a = 3.8, ready 4.3; X = 0.1 + 38000 x 1e-5
        // = 0.48; B idle: TTFT 4.78. Harm on A's one stream: stall 0.38,
        // warm 0.38 x 1.9 / 2 = 0.361. B would suffer 5.928: no veto.
        CostCase{"offload_spares_busy_home", OffloadFleet, 1, 0, 0, 4.78, 0.48, 0.38, 0.361, 0,
                 4.78 / 30 + 0.38 + 0.361},
        // B has 50000 queued (W_b = 5). Both legs sent at once: 0.7 s of it
        // is left when the KV is ready at 4.3. TTFT = 4.3 + 0.48 + 0.7.
        CostCase{"offload_concurrent_legs_overlap_decode_queue",
                 [] {
                   auto f = OffloadFleet();
                   SetPrefill(f, {50000, 5000});
                   return f;
                 },
                 1, 0, 0, 5.48, 0.48, 0.38, 0.361, 0, 5.48 / 30 + 0.38 + 0.361, Veto::kNone,
                 /*decode_leg_after_prefill=*/false},
        // The decode leg joins B's queue after the prefill: all 5 s of it.
        // TTFT = 4.3 + 0.48 + 5.
        CostCase{"offload_sequential_leg_waits_decode_queue",
                 [] {
                   auto f = OffloadFleet();
                   SetPrefill(f, {50000, 5000});
                   return f;
                 },
                 1, 0, 0, 9.78, 0.48, 0.38, 0.361, 0, 9.78 / 30 + 0.38 + 0.361},
        // B holds 30000: A would recompute 38000 > 10000 + max(2048, 1000).
        // X moves the 10000 B lacks: 0.2.
        CostCase{"veto_recomputes_prefix",
                 [] {
                   auto f = OffloadFleet();
                   SetCached(f, {30000, 2000});
                   return f;
                 },
                 1, 0, 0, 4.5, 0.2, 0.38, 0.361, 0, 4.5 / 30 + 0.38 + 0.361,
                 Veto::kRecomputesPrefix},
        // B's pool: 50000 with 20000 in flight cannot take 40000 (M_b = 1,
        // paid after the prefill: TTFT 4.3 + 0.48 + 1).
        CostCase{"veto_decode_kv_full",
                 [] {
                   auto f = OffloadFleet();
                   SetMemory(f, {50000, 0}, {0, 0});
                   SetInflightTokens(f, {20000, 0});
                   return f;
                 },
                 1, 0, 0, 5.78, 0.48, 0.38, 0.361, 0, 5.78 / 30 + 0.38 + 0.361,
                 Veto::kDecodeKvFull},
        // A's queue: W_a = 4 >= S_b = 3.8. TTFT = 4 + 3.8 + 0.48.
        CostCase{"veto_prefill_queued",
                 [] {
                   auto f = OffloadFleet();
                   SetPrefill(f, {0, 40000});
                   return f;
                 },
                 1, 0, 0, 8.28, 0.48, 0.38, 0.361, 0, 8.28 / 30 + 0.38 + 0.361,
                 Veto::kPrefillQueued},
        // B has no streams to spare: nothing decoding or queued there.
        CostCase{"veto_no_streams_on_home",
                 [] {
                   auto f = OffloadFleet();
                   SetDecoding(f, {0, 1});
                   return f;
                 },
                 1, 0, 0, 4.78, 0.48, 0.38, 0.361, 0, 4.78 / 30 + 0.38 + 0.361,
                 Veto::kNoStallSaved},
        // The learned factors scale every time term. Instance 0 twice as
        // slow as its profile: W = 2, S = 8, TTFT 10; stall 4 x 8 / 10 =
        // 3.2, warm 3.2 x 4 / 2 = 6.4.
        CostCase{"colo_slow_instance_scales_every_term",
                 [] {
                   auto f = Fleet(1, 40000);
                   SetPrefill(f, {10000});
                   SetDecoding(f, {4});
                   f.backends[0].prefill_time_factor = 2;
                   return f;
                 },
                 0, 0, 0, 10, 0, 3.2, 6.4, 0, 10.0 / 30 + 3.2 + 6.4},
        // As colo_admission_and_eviction at factor 2: M = 4, S = 8, TTFT 12;
        // the evicted KV's re-prefill 6 s / 2.
        CostCase{"colo_slow_instance_admission_and_eviction",
                 [] {
                   auto f = Fleet(1, 40000);
                   f.footprint_tokens_est = 40000;
                   SetMemory(f, {100000}, {90000});
                   SetInflightTokens(f, {80000});
                   f.backends[0].prefill_time_factor = 2;
                   return f;
                 },
                 0, 0, 0, 12, 0, 0, 0, 3, 12.0 / 30 + 3},
        // offload_sequential_leg_waits_decode_queue with A (1) at factor 2,
        // B (0) at 1.5 and the pair (1, 0) at 2: W_a = 1, S_a = 7.6, ready
        // 8.6; X = 2 x 0.48 = 0.96; D_b = 2 x 1.5 x 5 = 15: TTFT 24.56.
        // A's stream: stall 0.76, warm 0.76 x 3.8 / 2 = 1.444. S_b = 5.7
        // exceeds A's queue and B's harm 4.56 + 6.498 exceeds A's: no veto.
        CostCase{"offload_learned_factors",
                 [] {
                   auto f = OffloadFleet();
                   SetPrefill(f, {50000, 5000});
                   f.backends[0].prefill_time_factor = 1.5;
                   f.backends[1].prefill_time_factor = 2;
                   f.transfer_time_factors = {1, 1, 2, 1};
                   return f;
                 },
                 1, 0, 0, 24.56, 0.96, 0.76, 1.444, 0, 24.56 / 30 + 0.76 + 1.444},
        // A has as many streams as B: the stall only moves.
        CostCase{"veto_stall_only_moves",
                 [] {
                   auto f = OffloadFleet();
                   SetDecoding(f, {8, 8});
                   return f;
                 },
                 1, 0, 0, 4.78, 0.48, 3.04, 2.888, 0, 4.78 / 30 + 3.04 + 2.888,
                 Veto::kNoStallSaved}),
    [](const ::testing::TestParamInfo<CostCase>& info) { return info.param.label; });

TEST(PlacementCostTest, PrefillAndTransferSeconds) {
  classifier::OffloadCostParams r;
  r.prefill_tokens_per_second = 1.0 / 1.1e-4;
  r.attention_s_per_token_pair = 7.9e-9;
  // The H20 profile's anchors: 8K cold ~1.17 s of compute, 128K ~78.8 s.
  EXPECT_NEAR(PrefillSeconds(8192, 0, r), 8192 * 1.1e-4 + 7.9e-9 * 8192 * 4096.0, 1e-9);
  EXPECT_NEAR(PrefillSeconds(131072, 0, r), 131072 * 1.1e-4 + 7.9e-9 * 131072 * 65536.0, 1e-6);
  EXPECT_EQ(PrefillSeconds(-5, 100, r), 0);
  r.kv_bytes_per_token = 98304;
  r.link_bytes_per_second = 22e9;
  r.transfer_overhead_seconds = 0.15;
  EXPECT_NEAR(TransferSeconds(50000, r), 0.15 + 50000.0 * 98304 / 22e9, 1e-12);
  EXPECT_NEAR(TransferSeconds(0, r), 0.15, 1e-12);
}

TEST(PlacementCostTest, AHostTierHitIsReloadedAtTheHostLinksBandwidth) {
  PlacementParams p = Params();
  p.host_load_bytes_per_second = 50e9;
  FleetSnapshot f = Fleet(1, 20000);
  SetCached(f, {12000});
  const PlanCost gpu = Colocated(f, 0, RequestClass::kMedium, p);
  // The same 12,000 tokens cached, 10,000 of them only in the host tier.
  f.backends[0].host_reload_tokens_est = 10000;
  const PlanCost host = Colocated(f, 0, RequestClass::kMedium, p);
  EXPECT_NEAR(host.prefill_s - gpu.prefill_s, 10000 * p.rates.kv_bytes_per_token / 50e9, 1e-12);
  EXPECT_NEAR(host.ttft_s - gpu.ttft_s, host.prefill_s - gpu.prefill_s, 1e-12);
  // Far less than recomputing them.
  SetCached(f, {2000});
  f.backends[0].host_reload_tokens_est = 0;
  const PlanCost cold = Colocated(f, 0, RequestClass::kMedium, p);
  EXPECT_LT(host.prefill_s - gpu.prefill_s, 0.1 * (cold.prefill_s - gpu.prefill_s));
}

TEST(PlacementCostTest, APoolHitIsReloadedAtThePoolsBandwidth) {
  PlacementParams p = Params();
  p.pool_load_bytes_per_second = 20e9;
  FleetSnapshot f = Fleet(1, 20000);
  SetCached(f, {12000});
  const PlanCost gpu = Colocated(f, 0, RequestClass::kMedium, p);
  // The same 12,000 tokens cached: 2,000 in the host tier, 8,000 only in the pool.
  f.backends[0].host_reload_tokens_est = 2000;
  f.backends[0].pool_reload_tokens_est = 8000;
  const PlanCost tiers = Colocated(f, 0, RequestClass::kMedium, p);
  EXPECT_NEAR(tiers.prefill_s - gpu.prefill_s,
              2000 * p.rates.kv_bytes_per_token / p.host_load_bytes_per_second +
                  8000 * p.rates.kv_bytes_per_token / 20e9,
              1e-12);
}

TEST(PlacementCostTest, ThePoolReloadFactorScalesOnlyThePoolsPart) {
  PlacementParams p = Params();
  p.pool_load_bytes_per_second = 20e9;
  FleetSnapshot f = Fleet(1, 20000);
  SetCached(f, {12000});
  f.backends[0].host_reload_tokens_est = 2000;
  f.backends[0].pool_reload_tokens_est = 8000;
  const double host_s = 2000 * p.rates.kv_bytes_per_token / p.host_load_bytes_per_second;
  const double pool_s = 8000 * p.rates.kv_bytes_per_token / 20e9;
  EXPECT_NEAR(HostReloadSeconds(f, 0, p), host_s + pool_s, 1e-12);
  f.backends[0].pool_reload_time_factor = 3;
  EXPECT_NEAR(HostReloadSeconds(f, 0, p), host_s + 3 * pool_s, 1e-12);
}

TEST(PlacementCostTest, FactorsFromTheSnapshot) {
  auto f = Fleet(2, 1000);
  EXPECT_EQ(PrefillTimeFactor(f, 1), 1.0);
  EXPECT_EQ(TransferTimeFactor(f, 0, 1), 1.0);  // no table: every pair 1
  f.backends[1].prefill_time_factor = 0.5;
  f.transfer_time_factors = {1, 3, 4, 1};
  EXPECT_EQ(PrefillTimeFactor(f, 1), 0.5);
  EXPECT_EQ(TransferTimeFactor(f, 0, 1), 3.0);
  EXPECT_EQ(TransferTimeFactor(f, 1, 0), 4.0);
  f.transfer_time_factors = {2};  // not n x n (a fleet that grew): ignored
  EXPECT_EQ(TransferTimeFactor(f, 0, 1), 1.0);
}

TEST(PlacementCostTest, SloByClass) {
  const Options::PlacementSlo slo{.ttft_warm_s = 1, .ttft_medium_s = 3, .ttft_heavy_s = 9};
  EXPECT_EQ(TtftSlo(RequestClass::kWarm, slo), 1);
  EXPECT_EQ(TtftSlo(RequestClass::kMedium, slo), 3);
  EXPECT_EQ(TtftSlo(RequestClass::kHeavy, slo), 9);
}

TEST(PlacementCostTest, ParamsFromOptions) {
  Options o;
  o.offload_cost.prefill_tokens_per_second = 7000;
  o.slo.tpot_s = 0.05;
  o.default_output_tokens = 512;
  const PlacementParams p = ParamsFromOptions(o);
  EXPECT_EQ(p.rates.prefill_tokens_per_second, 7000);
  EXPECT_EQ(p.slo.tpot_s, 0.05);
  EXPECT_EQ(p.stream_tokens, 512);
}

}  // namespace
}  // namespace kvroute::router::placement
