#include "router/policies/heavy_to_least_decode.h"

#include <tuple>

namespace kvroute::router {

absl::StatusOr<Decision> HeavyToLeastDecodePolicy::Decide(const FleetSnapshot& fleet) const {
  const policy_internal::Classification c =
      policy_internal::ClassifyFleet(fleet, cache_aware_.thresholds());
  if (c.best_backend < 0) return policy_internal::NoHealthyBackend();
  if (c.request_class != RequestClass::kHeavy) return cache_aware_.Decide(fleet);
  int best = -1;
  for (int i = 0; i < static_cast<int>(fleet.backends.size()); ++i) {
    const BackendSnapshot& b = fleet.backends[i];
    if (!b.healthy) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const BackendSnapshot& o = fleet.backends[best];
    if (std::tie(b.decoding_requests, b.inflight_tokens) <
        std::tie(o.decoding_requests, o.inflight_tokens)) {
      best = i;
    }
  }
  Decision d = policy_internal::MakeColocated(fleet, c, best);
  policy_internal::MarkAffinity(fleet, d);
  return d;
}

}  // namespace kvroute::router
