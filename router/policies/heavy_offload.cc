#include "router/policies/heavy_offload.h"

#include <tuple>

#include "absl/strings/str_cat.h"

namespace kvroute::router {

absl::StatusOr<HeavyOffloadPolicy::Gate> HeavyOffloadPolicy::ParseGate(std::string_view gate) {
  if (gate == "threshold") return Gate::kThreshold;
  if (gate == "cost") return Gate::kCost;
  if (gate == "joint") return Gate::kJoint;
  return absl::InvalidArgumentError(absl::StrCat("offload_gate: unknown value '",
                                                 absl::string_view(gate.data(), gate.size()),
                                                 "' (joint|threshold|cost)"));
}

absl::StatusOr<Decision> HeavyOffloadPolicy::Decide(const FleetSnapshot& fleet) const {
  const policy_internal::Classification c =
      policy_internal::ClassifyFleet(fleet, cache_aware_.thresholds());
  if (c.best_backend < 0) return policy_internal::NoHealthyBackend();
  if (c.request_class != RequestClass::kHeavy) return cache_aware_.Decide(fleet);

  const int n = static_cast<int>(fleet.backends.size());
  const policy_internal::Affinity affinity =
      policy_internal::EvaluateAffinity(fleet, cache_aware_.overload_rule());
  int decode = affinity.backend;
  // An overloaded session instance is not a decode candidate while another
  // healthy instance exists.
  const int excluded = affinity.broken ? fleet.session_backend : -1;
  for (int pass = 0; decode < 0 && pass < 2; ++pass) {
    double decode_cost = 0;
    for (int i = 0; i < n; ++i) {
      if (!fleet.backends[i].healthy || (pass == 0 && i == excluded)) continue;
      const double cost = cache_aware_.Cost(fleet, i, c.request_class);
      if (decode < 0 ||
          fleet.backends[i].cached_tokens_est > fleet.backends[decode].cached_tokens_est ||
          (fleet.backends[i].cached_tokens_est == fleet.backends[decode].cached_tokens_est &&
           cost < decode_cost)) {
        decode = i;
        decode_cost = cost;
      }
    }
  }

  int prefill = -1;
  auto prefill_key = [&](int i) {
    const BackendSnapshot& b = fleet.backends[i];
    return std::make_tuple(b.inflight_prefill_tokens + policy_internal::NewTokensOn(fleet, i),
                           b.decoding_requests);
  };
  for (int i = 0; i < n; ++i) {
    if (i == decode || !fleet.backends[i].healthy) continue;
    if (prefill < 0 || prefill_key(i) < prefill_key(prefill)) prefill = i;
  }

  Decision d;
  if (prefill < 0) {
    d = policy_internal::MakeColocated(fleet, c, decode);
  } else if (gate_ == Gate::kCost) {
    const BackendSnapshot& a = fleet.backends[prefill];
    const BackendSnapshot& b = fleet.backends[decode];
    const classifier::OffloadEstimate e =
        classifier::EstimateOffload({.prompt_tokens = fleet.prompt_tokens_est,
                                     .decode_cached_tokens = b.cached_tokens_est,
                                     .prefill_cached_tokens = a.cached_tokens_est,
                                     .decode_queued_prefill_tokens = b.inflight_prefill_tokens,
                                     .prefill_queued_prefill_tokens = a.inflight_prefill_tokens},
                                    cost_);
    if (!e.worthwhile) return cache_aware_.Decide(fleet);
    d = policy_internal::MakeOffload(fleet, c, prefill, decode);
  } else {
    d = policy_internal::MakeOffload(fleet, c, prefill, decode);
  }
  policy_internal::MarkAffinity(fleet, d);
  return d;
}

}  // namespace kvroute::router
