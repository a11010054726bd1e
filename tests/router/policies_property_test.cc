// Property tests over random fleets from a seeded generator: the invariants
// every policy must keep whatever the fleet looks like.
#include <algorithm>
#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "classifier/classifier.h"
#include "gtest/gtest.h"
#include "router/policy_registry.h"

namespace kvroute::router {
namespace {

constexpr int kFleets = 4000;

FleetSnapshot RandomFleet(std::mt19937_64& rng) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  FleetSnapshot f;
  const int n = static_cast<int>(uni(1, 16));
  f.backends.resize(n);
  // Prompts around the interesting thresholds (5k, 20k) and beyond.
  f.prompt_tokens_est = uni(0, 3) == 0 ? uni(0, 6000) : uni(0, 80000);
  const int roles = static_cast<int>(uni(0, 2));
  for (int i = 0; i < n; ++i) {
    BackendSnapshot& b = f.backends[i];
    b.healthy = uni(0, 4) != 0;
    b.role = roles == 0 ? BackendRole::kBoth : static_cast<BackendRole>(uni(0, 2));
    b.inflight_requests = uni(0, 20);
    b.inflight_prefill_tokens = uni(0, 1) ? 0 : uni(0, 60000);
    b.decoding_requests = uni(0, 30);
    b.inflight_tokens = uni(0, 3) == 0 ? uni(0, 400000) : uni(0, 40000);
    b.engine_waiting = uni(-1, 4);
    b.cached_tokens_est = uni(0, 2) == 0 ? 0 : uni(0, f.prompt_tokens_est);
  }
  f.session_backend = static_cast<int>(uni(-1, n - 1));
  f.sequence = static_cast<uint64_t>(uni(0, 1000000));
  return f;
}

bool AffinityHolds(const FleetSnapshot& f, const Options& o) {
  const int s = f.session_backend;
  if (s < 0 || !f.backends[s].healthy) return false;
  double sum = 0;
  int healthy = 0;
  for (const BackendSnapshot& b : f.backends) {
    if (b.healthy) {
      sum += static_cast<double>(b.inflight_tokens);
      ++healthy;
    }
  }
  const double limit =
      std::max(o.overload_factor * sum / healthy, static_cast<double>(o.overload_min_tokens));
  return static_cast<double>(f.backends[s].inflight_tokens) <= limit;
}

class PolicyPropertyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PolicyPropertyTest, Invariants) {
  const std::string name = GetParam();
  Options o;
  o.mode = name;
  std::vector<BackendSpec> specs(2);
  specs[0].role = BackendRole::kPrefill;
  specs[1].role = BackendRole::kDecode;
  auto made = MakePolicy(o, specs);
  ASSERT_TRUE(made.ok()) << made.status();
  const std::unique_ptr<Policy> policy = *std::move(made);

  std::mt19937_64 rng(20260101 + std::hash<std::string>()(name) % 1000);
  int heavy = 0;
  int offload = 0;
  for (int iter = 0; iter < kFleets; ++iter) {
    const FleetSnapshot f = RandomFleet(rng);
    const int n = static_cast<int>(f.backends.size());
    int healthy = 0;
    int64_t best_cached = 0;
    for (const BackendSnapshot& b : f.backends) {
      if (!b.healthy) continue;
      ++healthy;
      best_cached = std::max(best_cached, b.cached_tokens_est);
    }
    absl::StatusOr<Decision> d = policy->Decide(f);
    if (healthy == 0) {
      ASSERT_EQ(d.status().code(), absl::StatusCode::kUnavailable);
      continue;
    }
    ASSERT_TRUE(d.ok()) << d.status();

    // Never an unhealthy or out-of-range instance.
    ASSERT_GE(d->prefill_backend, 0);
    ASSERT_LT(d->prefill_backend, n);
    ASSERT_GE(d->decode_backend, 0);
    ASSERT_LT(d->decode_backend, n);
    ASSERT_TRUE(f.backends[d->prefill_backend].healthy) << name << " iter " << iter;
    ASSERT_TRUE(f.backends[d->decode_backend].healthy) << name << " iter " << iter;

    // Mode and instances agree; OFFLOAD has A != B.
    if (d->mode == DecisionMode::kOffload) {
      ++offload;
      ASSERT_NE(d->prefill_backend, d->decode_backend);
    } else {
      ASSERT_EQ(d->prefill_backend, d->decode_backend);
    }

    // Class from the best healthy hit; HEAVY exactly when new >= T (and the
    // WARM rules do not apply).
    const int64_t new_tokens = f.prompt_tokens_est - best_cached;
    ASSERT_EQ(d->new_tokens_est, new_tokens);
    ASSERT_EQ(d->request_class,
              classifier::Classify(f.prompt_tokens_est, best_cached, o.thresholds));
    const bool warm_rule =
        (f.prompt_tokens_est > 0 && static_cast<double>(best_cached) / f.prompt_tokens_est >
                                        o.thresholds.warm_cached_fraction) ||
        new_tokens < o.thresholds.warm_new_tokens;
    if (!warm_rule) {
      ASSERT_EQ(d->request_class == RequestClass::kHeavy,
                new_tokens >= o.thresholds.heavy_threshold);
    }
    if (new_tokens < o.thresholds.heavy_threshold) {
      ASSERT_NE(d->request_class, RequestClass::kHeavy);
    }
    heavy += d->request_class == RequestClass::kHeavy ? 1 : 0;

    // Affinity kept unless overloaded or unhealthy (cache-aware policies;
    // v1 moves HEAVY requests on purpose).
    const bool affinity_policy =
        name == "baseline" || name == "v1" || name == "v2" || name == "v1_cost";
    const bool heavy_moves = name == "v1" && d->request_class == RequestClass::kHeavy;
    if (affinity_policy && !heavy_moves && f.session_backend >= 0) {
      if (AffinityHolds(f, o)) {
        ASSERT_EQ(d->decode_backend, f.session_backend) << name << " iter " << iter;
        ASSERT_TRUE(d->affinity_hit);
        ASSERT_FALSE(d->affinity_broken);
      } else {
        ASSERT_TRUE(d->affinity_broken);
        // Overloaded instances are left when there is anywhere else to go.
        if (healthy > 1) {
          ASSERT_NE(d->decode_backend, f.session_backend);
        }
      }
    }

    // Offload only from v2 (HEAVY) and pd_sep.
    if (d->mode == DecisionMode::kOffload) {
      ASSERT_TRUE(name == "pd_sep" || (name == "v2" && d->request_class == RequestClass::kHeavy));
    }
    // v2's joint decision offloads only past its guardrails: the decode home
    // has streams to spare (decoding or queued), the prefill site recomputes no prefix the home
    // holds, and the prediction comes with the plan.
    if (name == "v2" && d->mode == DecisionMode::kOffload) {
      const BackendSnapshot& a = f.backends[d->prefill_backend];
      const BackendSnapshot& b = f.backends[d->decode_backend];
      ASSERT_GT(std::max(b.decoding_requests, b.inflight_requests), 0);
      const int64_t new_a = f.prompt_tokens_est - a.cached_tokens_est;
      const int64_t new_b = f.prompt_tokens_est - b.cached_tokens_est;
      ASSERT_LE(static_cast<double>(new_a),
                static_cast<double>(new_b) + std::max(2048.0, 0.1 * static_cast<double>(new_b)));
      ASSERT_GT(d->predicted_transfer_s, 0);
    }
    if ((name == "v2" || name == "v1_cost") && d->request_class == RequestClass::kHeavy) {
      ASSERT_GT(d->predicted_ttft_s, 0) << name << " iter " << iter;
    }
    if (name == "pd_sep" && d->mode == DecisionMode::kOffload) {
      ASSERT_NE(f.backends[d->prefill_backend].role, BackendRole::kDecode);
      ASSERT_NE(f.backends[d->decode_backend].role, BackendRole::kPrefill);
    }
  }
  // The generator reaches the interesting cases.
  EXPECT_GT(heavy, kFleets / 20);
  // pd_sep offloads by construction; v2's joint decision abstains in most
  // random fleets (its guardrails) but not all.
  if (name == "pd_sep") {
    EXPECT_GT(offload, kFleets / 40);
  }
  if (name == "v2") {
    EXPECT_GT(offload, kFleets / 200);
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyPropertyTest,
                         ::testing::Values("round_robin", "least_loaded", "baseline", "v1", "v2",
                                           "v1_cost", "pd_sep"));

}  // namespace
}  // namespace kvroute::router
