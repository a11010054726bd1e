#include "router/policies/least_loaded.h"

#include "router/policies/common.h"

namespace kvroute::router {

absl::StatusOr<Decision> LeastLoadedPolicy::Decide(const FleetSnapshot& fleet) const {
  const policy_internal::Classification c = policy_internal::ClassifyFleet(fleet, thresholds_);
  int best = -1;
  for (int i = 0; i < static_cast<int>(fleet.backends.size()); ++i) {
    const BackendSnapshot& b = fleet.backends[i];
    if (!b.healthy) continue;
    if (best < 0 || b.inflight_requests < fleet.backends[best].inflight_requests) best = i;
  }
  if (best < 0) return policy_internal::NoHealthyBackend();
  return policy_internal::MakeColocated(fleet, c, best);
}

}  // namespace kvroute::router
