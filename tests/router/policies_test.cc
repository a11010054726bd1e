// Table-driven policy tests over hand-built snapshots.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "router/policies/cache_aware.h"
#include "router/policy_registry.h"
#include "tests/router/policy_test_util.h"

namespace kvroute::router {
namespace {

using testing::Fleet;
using testing::SetCached;
using testing::SetDecoding;
using testing::SetInflightRequests;
using testing::SetInflightTokens;
using testing::SetMemory;
using testing::SetPrefill;
using testing::SetUnhealthy;

std::unique_ptr<Policy> Make(const std::string& name, Options o = {}) {
  o.mode = name;
  std::vector<BackendSpec> specs(4);
  auto p = MakePolicy(o, specs);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

struct PolicyCase {
  std::string label;
  std::string mode;
  std::function<FleetSnapshot()> fleet;
  int want_prefill;
  int want_decode;
  DecisionMode want_mode = DecisionMode::kColocated;
  RequestClass want_class = RequestClass::kWarm;
  bool want_affinity_hit = false;
  bool want_affinity_broken = false;
};

class PolicyTableTest : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(PolicyTableTest, Decides) {
  const PolicyCase& c = GetParam();
  Options o;
  o.offload_gate = "threshold";
  auto policy = Make(c.mode, o);
  const FleetSnapshot fleet = c.fleet();
  absl::StatusOr<Decision> d = policy->Decide(fleet);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->prefill_backend, c.want_prefill);
  EXPECT_EQ(d->decode_backend, c.want_decode);
  EXPECT_EQ(d->mode, c.want_mode);
  EXPECT_EQ(d->request_class, c.want_class);
  EXPECT_EQ(d->affinity_hit, c.want_affinity_hit);
  EXPECT_EQ(d->affinity_broken, c.want_affinity_broken);
  EXPECT_EQ(d->prompt_tokens_est, fleet.prompt_tokens_est);
  EXPECT_EQ(d->cached_tokens_est, fleet.backends[c.want_decode].cached_tokens_est);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, PolicyTableTest,
    ::testing::Values(
        // --- round_robin: the (seq mod healthy)-th healthy backend.
        PolicyCase{"rr_seq0", "round_robin", [] { return Fleet(3, 100); }, 0, 0},
        PolicyCase{"rr_seq4", "round_robin",
                   [] {
                     auto f = Fleet(3, 100);
                     f.sequence = 4;
                     return f;
                   },
                   1, 1},
        PolicyCase{"rr_skips_unhealthy", "round_robin",
                   [] {
                     auto f = Fleet(3, 100);
                     f.sequence = 1;
                     SetUnhealthy(f, {1});
                     return f;
                   },
                   2, 2},
        // --- least_loaded: fewest in-flight requests, tie -> lowest index.
        PolicyCase{"ll_fewest", "least_loaded",
                   [] {
                     auto f = Fleet(3, 100);
                     SetInflightRequests(f, {3, 1, 1});
                     return f;
                   },
                   1, 1},
        PolicyCase{"ll_unhealthy", "least_loaded",
                   [] {
                     auto f = Fleet(3, 100);
                     SetInflightRequests(f, {3, 1, 2});
                     SetUnhealthy(f, {1});
                     return f;
                   },
                   2, 2},
        // --- baseline: cost = new + prefill queue + 0.05 x inflight + ...
        PolicyCase{"base_cache_wins", "baseline",
                   [] {
                     auto f = Fleet(3, 10000);
                     SetCached(f, {0, 8000, 0});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kWarm},
        PolicyCase{"base_load_beats_cache", "baseline",
                   [] {
                     auto f = Fleet(3, 10000);
                     SetCached(f, {0, 8000, 0});
                     SetPrefill(f, {0, 20000, 0});  // 22000 vs 10000
                     return f;
                   },
                   0, 0, DecisionMode::kColocated, RequestClass::kWarm},
        PolicyCase{"base_decode_tokens_break_tie", "baseline",
                   [] {
                     auto f = Fleet(3, 10000);
                     SetInflightTokens(f, {40000, 20000, 30000});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kMedium},
        PolicyCase{"base_engine_waiting_penalty", "baseline",
                   [] {
                     auto f = Fleet(2, 10000);
                     SetCached(f, {500, 0});
                     f.backends[0].engine_waiting = 3;  // +3000
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kMedium},
        PolicyCase{"base_affinity_kept", "baseline",
                   [] {
                     auto f = Fleet(3, 10000);
                     SetCached(f, {8000, 0, 7000});
                     f.session_backend = 2;
                     return f;
                   },
                   2, 2, DecisionMode::kColocated, RequestClass::kWarm, true, false},
        PolicyCase{"base_affinity_kept_below_min_tokens", "baseline",
                   [] {
                     auto f = Fleet(4, 10000);
                     SetInflightTokens(f, {0, 0, 0, 10000});  // 4x mean, < 32768
                     f.session_backend = 3;
                     return f;
                   },
                   3, 3, DecisionMode::kColocated, RequestClass::kMedium, true, false},
        // --- baseline, stalled streams: new x (1 + decoding) unless WARM there.
        PolicyCase{"base_cold_prompt_avoids_decoding_streams", "baseline",
                   [] {
                     auto f = Fleet(3, 50000);
                     SetDecoding(f, {4, 0, 2});     // 250000, 50000, 150000
                     SetPrefill(f, {0, 30000, 0});  // + 30000 on 1
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kHeavy},
        PolicyCase{"base_medium_stall_outweighs_queue", "baseline",
                   [] {
                     auto f = Fleet(2, 10000);
                     SetDecoding(f, {3, 0});     // 40000
                     SetPrefill(f, {0, 25000});  // 35000
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kMedium},
        PolicyCase{"base_warm_pays_no_stall", "baseline",
                   [] {
                     auto f = Fleet(3, 10000);
                     SetCached(f, {0, 8000, 0});
                     SetDecoding(f, {0, 9, 0});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kWarm},
        PolicyCase{"base_warm_turn_moved_off_its_home_pays_stall_where_cold", "baseline",
                   [] {
                     // WARM on its overloaded home 0; elsewhere a 60,000-token
                     // prefill: 1 stalls six streams (420,000), 2 waits behind
                     // 20,000 queued (80,000).
                     auto f = Fleet(3, 60000);
                     SetCached(f, {58000, 0, 0});
                     SetInflightTokens(f, {200000, 0, 0});
                     SetDecoding(f, {0, 6, 0});
                     SetPrefill(f, {0, 0, 20000});
                     f.session_backend = 0;
                     return f;
                   },
                   2, 2, DecisionMode::kColocated, RequestClass::kWarm, false, true},
        // --- baseline, placement by memory.
        PolicyCase{"base_new_session_goes_where_its_kv_fits", "baseline",
                   [] {
                     auto f = Fleet(3, 15000);
                     f.footprint_tokens_est = 15256;
                     // 0: nothing queued, but its resident sessions fill the pool, so 10,256
                     // of their tokens would be evicted; 1: 5,000 queued, room to spare.
                     SetMemory(f, {100000, 100000, 100000}, {95000, 10000, 60000});
                     SetPrefill(f, {0, 5000, 8000});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kMedium},
        PolicyCase{"base_every_pool_full_load_decides", "baseline",
                   [] {
                     auto f = Fleet(3, 15000);
                     f.footprint_tokens_est = 15256;
                     SetMemory(f, {100000, 100000, 100000}, {150000, 120000, 130000});
                     SetPrefill(f, {4000, 5000, 3000});
                     return f;
                   },
                   2, 2, DecisionMode::kColocated, RequestClass::kMedium},
        PolicyCase{"base_admission_wait_counts", "baseline",
                   [] {
                     auto f = Fleet(2, 15000);
                     f.footprint_tokens_est = 15256;
                     // 0: requests in flight hold 95,000 of 100,000 tokens: the request waits
                     // for 10,256 of them to leave.
                     SetMemory(f, {100000, 100000}, {0, 0});
                     SetInflightTokens(f, {95000, 20000});
                     SetPrefill(f, {0, 6000});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kMedium},
        PolicyCase{"base_prefix_evicted_session_moves", "baseline",
                   [] {
                     auto f = Fleet(3, 60000);
                     f.footprint_tokens_est = 60256;
                     SetCached(f, {14000, 14000, 14000});  // only the shared system prompt
                     SetPrefill(f, {30000, 0, 10000});
                     f.session_backend = 0;
                     f.session_prefix_evicted = true;
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kHeavy, false, true},
        PolicyCase{"base_prefix_evicted_session_stays_when_home_is_cheapest", "baseline",
                   [] {
                     auto f = Fleet(3, 60000);
                     f.footprint_tokens_est = 60256;
                     SetCached(f, {20000, 14000, 14000});
                     SetPrefill(f, {0, 1000, 10000});
                     f.session_backend = 0;
                     f.session_prefix_evicted = true;
                     return f;
                   },
                   0, 0, DecisionMode::kColocated, RequestClass::kHeavy, true, false},
        PolicyCase{"base_session_kept_while_its_prefix_lives", "baseline",
                   [] {
                     auto f = Fleet(3, 60000);
                     f.footprint_tokens_est = 60256;
                     SetCached(f, {58000, 14000, 14000});
                     SetPrefill(f, {30000, 0, 10000});
                     f.session_backend = 0;
                     return f;
                   },
                   0, 0, DecisionMode::kColocated, RequestClass::kWarm, true, false},
        PolicyCase{"base_affinity_broken_overload", "baseline",
                   [] {
                     auto f = Fleet(3, 10000);
                     SetCached(f, {0, 0, 9000});
                     SetInflightTokens(f, {0, 10000, 100000});  // mean 36667
                     f.session_backend = 2;
                     return f;
                   },
                   0, 0, DecisionMode::kColocated, RequestClass::kWarm, false, true},
        PolicyCase{"base_affinity_broken_unhealthy", "baseline",
                   [] {
                     auto f = Fleet(3, 10000);
                     SetCached(f, {0, 0, 9000});
                     SetUnhealthy(f, {2});
                     f.session_backend = 2;
                     return f;
                   },
                   0, 0, DecisionMode::kColocated, RequestClass::kMedium, false, true},
        PolicyCase{"base_heavy_same_as_warm", "baseline",
                   [] {
                     auto f = Fleet(3, 50000);
                     SetCached(f, {0, 1000, 0});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kHeavy},
        // --- v1: HEAVY co-located on the least decode load.
        PolicyCase{"v1_heavy_least_decode", "v1",
                   [] {
                     auto f = Fleet(3, 50000);
                     SetCached(f, {1000, 0, 0});
                     SetDecoding(f, {5, 2, 3});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kHeavy},
        PolicyCase{"v1_heavy_tie_inflight_tokens", "v1",
                   [] {
                     auto f = Fleet(3, 50000);
                     SetDecoding(f, {2, 2, 2});
                     SetInflightTokens(f, {900, 800, 800});
                     f.session_backend = 0;
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kHeavy, false, true},
        PolicyCase{"v1_warm_as_baseline", "v1",
                   [] {
                     auto f = Fleet(3, 10000);
                     SetCached(f, {0, 8000, 0});
                     SetDecoding(f, {0, 9, 0});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kWarm},
        // --- v2: HEAVY offloads: B = best hit / session, A = least prefill work.
        PolicyCase{"v2_heavy_offload", "v2",
                   [] {
                     auto f = Fleet(3, 40000);
                     SetCached(f, {0, 4000, 0});
                     SetPrefill(f, {10000, 0, 0});
                     return f;
                   },
                   2, 1, DecisionMode::kOffload, RequestClass::kHeavy},
        PolicyCase{"v2_heavy_session_is_decode", "v2",
                   [] {
                     auto f = Fleet(3, 40000);
                     SetCached(f, {2000, 4000, 0});
                     f.session_backend = 0;
                     return f;
                   },
                   1, 0, DecisionMode::kOffload, RequestClass::kHeavy, true, false},
        PolicyCase{"v2_prefill_cache_aware", "v2",
                   [] {
                     auto f = Fleet(4, 40000);
                     SetCached(f, {9000, 8000, 0, 0});
                     SetPrefill(f, {0, 5000, 0, 0});  // 1: 5000+32000 < 40000
                     return f;
                   },
                   1, 0, DecisionMode::kOffload, RequestClass::kHeavy},
        PolicyCase{"v2_single_healthy_colocated", "v2",
                   [] {
                     auto f = Fleet(3, 40000);
                     SetUnhealthy(f, {0, 2});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kHeavy},
        PolicyCase{"v2_medium_as_baseline", "v2",
                   [] {
                     auto f = Fleet(3, 15000);
                     SetCached(f, {0, 4000, 0});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kMedium},
        // --- pd_sep: roles from the snapshot.
        PolicyCase{"pd_sep_pools", "pd_sep",
                   [] {
                     auto f = Fleet(4, 1000);
                     f.backends[0].role = BackendRole::kPrefill;
                     f.backends[1].role = BackendRole::kPrefill;
                     f.backends[2].role = BackendRole::kDecode;
                     f.backends[3].role = BackendRole::kDecode;
                     SetPrefill(f, {500, 100, 0, 0});
                     SetInflightTokens(f, {0, 0, 900, 300});
                     return f;
                   },
                   1, 3, DecisionMode::kOffload, RequestClass::kWarm},
        PolicyCase{"pd_sep_no_decode_pool_colocates", "pd_sep",
                   [] {
                     auto f = Fleet(3, 1000);
                     f.backends[0].role = BackendRole::kPrefill;
                     f.backends[1].role = BackendRole::kPrefill;
                     f.backends[2].role = BackendRole::kDecode;
                     SetUnhealthy(f, {2});
                     SetInflightTokens(f, {10, 5, 0});
                     return f;
                   },
                   1, 1, DecisionMode::kColocated, RequestClass::kWarm}),
    [](const ::testing::TestParamInfo<PolicyCase>& info) { return info.param.label; });

// A turn whose instance holds its 90K-token context but has 104K tokens of
// KV to free first, against an idle instance holding only its 22K-token
// system prompt. Counted linearly, recomputing 68K tokens there is cheaper
// than the admission wait; with each new token's attention to the 56K
// tokens before it on average, the recompute costs 273K prefill tokens more
// and the turn stays.
TEST(BaselineAttentionTest, PricesARecomputeOfALongContextWithItsAttention) {
  Options o;
  o.offload_cost.prefill_tokens_per_second = 9090;
  o.offload_cost.attention_s_per_token_pair = 7.9e-9;
  auto f = Fleet(2, 90000);
  f.footprint_tokens_est = 90256;
  SetCached(f, {90000, 22000});
  SetMemory(f, {286000, 286000}, {0, 0});
  SetInflightTokens(f, {300000, 0});

  const CacheAwarePolicy linear(o);
  EXPECT_DOUBLE_EQ(linear.Cost(f, 1, RequestClass::kWarm), 68000);
  absl::StatusOr<Decision> d = linear.Decide(f);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->decode_backend, 1);

  o.baseline.attention_weight = 1;
  const CacheAwarePolicy attention(o);
  EXPECT_NEAR(attention.Cost(f, 1, RequestClass::kWarm),
              68000 + 7.9e-9 * 9090 * 68000.0 * (22000 + 34000), 1e-6);
  EXPECT_DOUBLE_EQ(attention.Cost(f, 0, RequestClass::kWarm),
                   linear.Cost(f, 0, RequestClass::kWarm));
  d = attention.Decide(f);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->decode_backend, 0);
}

TEST(V2CostGateTest, SlowLinkServesAsBaseline) {
  Options o;
  o.offload_gate = "cost";
  o.offload_cost.link_bytes_per_second = 1e6;  // 1 MB/s: transfer hopeless
  auto policy = Make("v2", o);
  auto f = Fleet(3, 40000);
  SetCached(f, {0, 4000, 0});
  absl::StatusOr<Decision> d = policy->Decide(f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->mode, DecisionMode::kColocated);
  EXPECT_EQ(d->request_class, RequestClass::kHeavy);
  EXPECT_EQ(d->decode_backend, 1);

  o.offload_cost.link_bytes_per_second = 50e9;
  policy = Make("v2", o);
  d = policy->Decide(f);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->mode, DecisionMode::kOffload);
}

TEST(PolicyRegistryTest, NamesAndErrors) {
  for (const std::string& name : PolicyNames()) {
    Options o;
    o.mode = name;
    std::vector<BackendSpec> specs(2);
    auto p = MakePolicy(o, specs);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  Options o;
  o.mode = "nope";
  auto p = MakePolicy(o, std::vector<BackendSpec>(2));
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("mode: unknown mode 'nope' (expected one of round_robin"),
            std::string::npos)
      << p.status();
  o.mode = "pd_sep";
  std::vector<BackendSpec> only_prefill(2);
  only_prefill[0].role = only_prefill[1].role = BackendRole::kPrefill;
  EXPECT_EQ(MakePolicy(o, only_prefill).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PolicyRegistryTest, EveryRowIsComplete) {
  ASSERT_EQ(Policies().size(), PolicyNames().size());
  for (const PolicyEntry& e : Policies()) {
    EXPECT_FALSE(e.name.empty());
    EXPECT_FALSE(e.description.empty()) << e.name;
    EXPECT_EQ(e.description.find('\n'), std::string_view::npos) << e.name;
    EXPECT_NE(e.make, nullptr) << e.name;
    EXPECT_EQ(FindPolicy(e.name), &e) << e.name;
    EXPECT_NE(PolicyHelp().find(e.description), std::string::npos) << e.name;
  }
  EXPECT_EQ(FindPolicy("v3"), nullptr);
  EXPECT_TRUE(CheckPolicyName("v2").ok());
  EXPECT_EQ(CheckPolicyName("v3").code(), absl::StatusCode::kInvalidArgument);
}

// kvroute --list-modes prints ModeList(); deploy/vllm/launch-fleet.sh parses it, so the format
// is pinned here: one line per row in table order, the name, then key=yes|no.
TEST(PolicyRegistryTest, ModeListIsOneLinePerRowWithItsProperties) {
  const std::string list = ModeList();
  EXPECT_EQ(list,
            "round_robin threshold_sensitive=no homes_sessions=no needs_connector=no\n"
            "least_loaded threshold_sensitive=no homes_sessions=no needs_connector=no\n"
            "baseline threshold_sensitive=no homes_sessions=yes needs_connector=no\n"
            "v1 threshold_sensitive=yes homes_sessions=yes needs_connector=no\n"
            "v1_cost threshold_sensitive=yes homes_sessions=yes needs_connector=no\n"
            "v2 threshold_sensitive=yes homes_sessions=yes needs_connector=yes\n"
            "pd_sep threshold_sensitive=no homes_sessions=no needs_connector=yes\n");
  size_t lines = 0;
  for (const PolicyEntry& e : Policies()) {
    const std::string line = absl::StrCat(
        std::string(e.name), " threshold_sensitive=", e.threshold_sensitive ? "yes" : "no",
        " homes_sessions=", e.homes_sessions ? "yes" : "no",
        " needs_connector=", e.needs_connector ? "yes" : "no", "\n");
    EXPECT_NE(list.find(line), std::string::npos) << line;
    ++lines;
  }
  EXPECT_EQ(static_cast<size_t>(std::count(list.begin(), list.end(), '\n')), lines);
  EXPECT_EQ(PolicyNamesWith(&PolicyEntry::threshold_sensitive),
            (std::vector<std::string>{"v1", "v1_cost", "v2"}));
  EXPECT_EQ(PolicyNamesWith(&PolicyEntry::needs_connector),
            (std::vector<std::string>{"v2", "pd_sep"}));
}

// A policy reports the name of the row that built it; one class may serve two rows.
TEST(PolicyRegistryTest, PoliciesTakeTheirNameFromTheTable) {
  for (const std::string mode : {"v1_cost", "v2"}) {
    Options o;
    o.mode = mode;
    auto p = MakePolicy(o, std::vector<BackendSpec>(2));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->name(), mode);
  }
}

// pd_sep needs a prefill-capable and a distinct decode-capable instance; `both`
// counts for either pool.
TEST(PolicyRegistryTest, PdSepPools) {
  Options o;
  o.mode = "pd_sep";
  auto fleet = [](std::vector<BackendRole> roles) {
    std::vector<BackendSpec> specs(roles.size());
    for (size_t i = 0; i < roles.size(); ++i) specs[i].role = roles[i];
    return specs;
  };
  using R = BackendRole;
  EXPECT_TRUE(ValidatePolicy(o, fleet({R::kPrefill, R::kDecode})).ok());
  EXPECT_TRUE(ValidatePolicy(o, fleet({R::kBoth, R::kBoth})).ok());
  EXPECT_TRUE(ValidatePolicy(o, fleet({R::kPrefill, R::kBoth})).ok());
  EXPECT_TRUE(ValidatePolicy(o, fleet({R::kBoth, R::kDecode})).ok());
  for (const auto& bad : {fleet({R::kBoth}), fleet({R::kPrefill, R::kPrefill}),
                          fleet({R::kDecode, R::kDecode}), fleet({})}) {
    const absl::Status st = ValidatePolicy(o, bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(st.message(), "backends: mode pd_sep needs")) << st;
  }
}

TEST(PolicyRegistryTest, OffloadGate) {
  Options o;
  o.mode = "v2";
  for (const char* gate : {"joint", "threshold", "cost"}) {
    o.offload_gate = gate;
    EXPECT_TRUE(ValidatePolicy(o, std::vector<BackendSpec>(2)).ok()) << gate;
  }
  o.offload_gate = "maybe";
  const absl::Status st = ValidatePolicy(o, std::vector<BackendSpec>(2));
  EXPECT_TRUE(absl::StartsWith(st.message(), "offload_gate: unknown value 'maybe'")) << st;
  // Only v2 reads the gate.
  o.mode = "v1";
  EXPECT_TRUE(ValidatePolicy(o, std::vector<BackendSpec>(2)).ok());
}

TEST(PolicyTest, NoHealthyIsUnavailable) {
  for (const std::string& name : PolicyNames()) {
    auto policy = Make(name);
    auto f = Fleet(2, 100);
    SetUnhealthy(f, {0, 1});
    EXPECT_EQ(policy->Decide(f).status().code(), absl::StatusCode::kUnavailable) << name;
  }
}

TEST(PolicyTest, PureSameSnapshotSameDecision) {
  for (const std::string& name : PolicyNames()) {
    auto policy = Make(name);
    auto f = Fleet(4, 30000);
    SetCached(f, {100, 2000, 50, 0});
    SetPrefill(f, {10, 0, 3000, 0});
    f.sequence = 7;
    const Decision a = *policy->Decide(f);
    const Decision b = *policy->Decide(f);
    EXPECT_EQ(a.prefill_backend, b.prefill_backend) << name;
    EXPECT_EQ(a.decode_backend, b.decode_backend) << name;
  }
}

}  // namespace
}  // namespace kvroute::router
